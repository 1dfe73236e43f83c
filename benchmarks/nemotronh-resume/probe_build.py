"""What recall_probe.py and state_reach.py share: a Nemotron-H build loaded on the CPU in float32
(a finished folder or one stopped part-way, one group or build_nemotronh_groups.py's n_groups),
and the report's documents rebuilt with the asked lines, where each answer is and which line
each token is on. Imported by path beside them; torch and transformers (an engine venv)."""
import itertools
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "canary"))
import build_canary as shared  # the builders, by path, as the GPU calls run them
import build_nemotronh as b
import build_nemotronh_groups as g
import corpus


def load(folder: Path, seed: int):
    """The build's tokenizer and model. PROBE_HEADS and PROBE_DECAY (default 4, long) say the
    build's --mamba-heads and --decay where they are not the recipe's; n_groups is read from
    the folder's config.json, or for a stopped build (no config) from its saved in_proj's rows."""
    out = Path(tempfile.mkdtemp())
    tok = shared.build_tokenizer(out, seed, 1024)
    args = SimpleNamespace(hidden=128, pattern="M-M-M-*-", state=128, mamba_heads=int(os.environ.get("PROBE_HEADS", "4")),
                           chunk=128, max_len=131072, decay=os.environ.get("PROBE_DECAY", "long"))
    config, saved = folder / "config.json", None
    if config.is_file():
        groups = json.loads(config.read_text()).get("n_groups", 1)
    else:  # stopped part-way: the builder's own save (build_canary.RESUME), the model's names
        saved = torch.load(folder / shared.RESUME, map_location="cpu", weights_only=False)["model"]
        rows = saved["model.layers.0.mixer.in_proj.weight"].shape[0]  # gate, x, G x (B, C), dt
        groups = (rows - 2 * args.mamba_heads * 64 - args.mamba_heads) // (2 * args.state)
    g.GROUPS, b.config = groups, g.config
    torch.manual_seed(seed)
    model, _ = b.new_model(args, tok, -(-len(tok) // 64) * 64)
    if saved is None:
        b.init_from(model, folder, out)
    else:
        model.load_state_dict(saved)
    return tok, model


def documents(tok, length: int, count: int):
    """``count`` documents of ``length`` prefix tokens as build_canary.report draws them (4
    turns), each as (ids, answer mask, lines, asked line indices, line of each token)."""
    rng = random.Random(1234 + length)
    for _ in range(count):
        lines = corpus.lines_for(length)
        system, defs = corpus.system_prompt(rng, lines)
        asked, msgs = [], [("system", system)]
        for t in range(4):
            user, i = corpus.user_turn(rng, defs, t)
            asked.append(i)
            msgs += [("user", user), ("assistant", corpus.answer(defs, i))]
        ids, _, ans = shared.encode(tok, [corpus.chat(msgs)], torch.device("cpu"))
        line_of, line = [], 0  # line 0 is "<|im_start|>system", 1 the header, 2 the tools
        for piece in (tok.decode([int(x)]) for x in ids[0]):
            line_of.append(line)
            line += piece.count("\n")
        yield ids, ans, lines, asked, line_of


def answer_spans(mask: list) -> list[tuple[int, int]]:
    """The [start, end) runs of answer tokens in a target mask."""
    spans, pos = [], 0
    for answer, run in itertools.groupby(mask):
        n = len(list(run))
        if answer:
            spans.append((pos, pos + n))
        pos += n
    return spans


def answers(tok, ids, ans, logits):
    """Per answer of a document (the first 4): its turn, its [k, j) in the targets (ids shifted
    by one), the offset of its " =" in it, and whether each target is the logits' argmax."""
    target, mask = ids[0, 1:], ans[0, 1:].tolist()
    ok = (logits.argmax(-1) == target).tolist()
    for t, (k, j) in enumerate(answer_spans(mask)[:4]):
        eq = next((n for n, x in enumerate(target[k:j]) if "=" in tok.decode([int(x)])), None)
        if eq is not None:
            yield t, k, j, eq, ok
