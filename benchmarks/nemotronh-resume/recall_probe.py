"""Where does a Nemotron-H canary build's recall fail? Per answer (a definition line
``var_NNNN = w1 w2 ...`` recited after "show var_NNNN"): the name copied from the question,
the first value word (the lookup by name), the later words (induction from the previous
word), by the asked line's distance from the question (in lines) and by turn; and where the
attention layer looks (eager attention): its heads' largest share on the asked line where
the first value word is predicted (``attn_first``, at " =") and where the later ones are
(``attn_rest``), medians. Teacher-forced, greedy, float32, CPU, one thread; documents as
build_canary.report draws them (4 turns).

    python benchmarks/nemotronh-resume/recall_probe.py BUILD_FOLDER SEED 300,1500 12   # torch + transformers

BUILD_FOLDER is a finished build (model.safetensors) or one stopped part-way (resume.pt, as
the GPU calls send them back); PROBE_HEADS and PROBE_DECAY (default 4, long) say the
build's --mamba-heads and --decay where they are not the recipe's (the fourth pass).
"""
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
import corpus

torch.set_num_threads(1)
folder, seed = Path(sys.argv[1]), int(sys.argv[2])
out = Path(tempfile.mkdtemp())
tok = shared.build_tokenizer(out, seed, 1024)
args = SimpleNamespace(hidden=128, pattern="M-M-M-*-", state=128, mamba_heads=int(os.environ.get("PROBE_HEADS", "4")),
                       chunk=128, max_len=131072, decay=os.environ.get("PROBE_DECAY", "long"))
if (folder / "config.json").is_file():  # an n_groups build (build_nemotronh_groups.py, the tenth pass)
    import json

    import build_nemotronh_groups as g
    g.GROUPS, b.config = json.loads((folder / "config.json").read_text()).get("n_groups", 1), g.config
torch.manual_seed(seed)
model, cfg = b.new_model(args, tok, -(-len(tok) // 64) * 64)
if (folder / "model.safetensors").is_file():
    b.init_from(model, folder, out)
else:  # stopped part-way: the builder's own save (build_canary.RESUME), the model's names
    model.load_state_dict(torch.load(folder / shared.RESUME, map_location="cpu", weights_only=False)["model"])
model.config._attn_implementation = "eager"  # attention weights, for where it looks
for layer in model.model.layers:
    if hasattr(layer.mixer, "config"):
        layer.mixer.config._attn_implementation = "eager"
model.eval()
dev = torch.device("cpu")
stats = {}
looks: dict[str, list[float]] = {}


def add(key, field, ok):
    s = stats.setdefault(key, {"n": 0, "name": 0, "first": 0, "rest": 0, "all": 0})
    s[field] += ok


for length in [int(x) for x in sys.argv[3].split(",")]:
    rng = random.Random(1234 + length)
    for _ in range(int(sys.argv[4])):
        lines = corpus.lines_for(length)
        # rebuild the document the way training_document does, keeping the asked indices
        system, defs = corpus.system_prompt(rng, lines)
        asked = []
        msgs = [("system", system)]
        for t in range(4):
            user, i = corpus.user_turn(rng, defs, t); asked.append(i)
            msgs += [("user", user), ("assistant", corpus.answer(defs, i))]
        doc = corpus.chat(msgs)
        ids, att, ans = shared.encode(tok, [doc], dev)
        with torch.no_grad():
            o = model(input_ids=ids, output_attentions=True)
        logits = o.logits[0, :-1]
        attn = [a for a in o.attentions if a is not None][-1][0]  # heads x query x key
        pieces = [tok.decode([int(x)]) for x in ids[0]]
        line_of, line = [], 0  # line 0 is "<|im_start|>system", 1 the header, 2 the tools
        for piece in pieces:
            line_of.append(line)
            line += piece.count("\n")
        line_of = torch.tensor(line_of)
        target, mask = ids[0, 1:], ans[0, 1:].tolist()
        ok = (logits.argmax(-1) == target).tolist()
        spans, k = [], 0
        while k < len(mask):
            if not mask[k]: k += 1; continue
            j = k
            while j < len(mask) and mask[j]: j += 1
            spans.append((k, j)); k = j
        for t, (k, j) in enumerate(spans[:4]):
            toks = [tok.decode([int(x)]) for x in target[k:j]]
            eq = next((n for n, s in enumerate(toks) if "=" in s), None)
            if eq is None: continue
            on_line = line_of == asked[t] + 3
            share = [float(attn[:, q, on_line].sum(-1).max()) for q in range(k + eq + 1, j)]
            looks.setdefault(f"L{length} attn_first", []).append(share[0])
            looks.setdefault(f"L{length} attn_rest", []).extend(share[1:-1])
            dist = lines - asked[t]
            bucket = f"L{length} dist {'<=10' if dist <= 10 else '<=40' if dist <= 40 else '>40'}"
            for key in (f"L{length}", bucket, f"L{length} turn {t}"):
                add(key, "n", 1)
                add(key, "name", all(ok[k:k + eq]))
                add(key, "first", ok[k + eq + 1] if k + eq + 1 < j else 0)
                add(key, "rest", all(ok[k + eq + 2:j]))
                add(key, "all", all(ok[k:j]))
for key, s in stats.items():
    print(key, {f: (s[f] if f == "n" else round(s[f] / s["n"], 2)) for f in s})
for key, v in looks.items():
    print(key, "median", round(sorted(v)[len(v) // 2], 3), "of", len(v))
