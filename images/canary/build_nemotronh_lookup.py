"""build_nemotronh_groups.py with ``--lookup-weight W``: the attention layer is taught where
the asked line is. Issue 41, the twelfth recipe.

Why: eleven passes made a Nemotron-H canary that looks a name up in the Mamba2 state, a
linear associative memory that holds ~100 lines (images/canary/README.md, "Why the lookup
stops at ~100 lines"); more 10k steps (the eleventh pass: 2,337 more, one group) and 8 key
spaces (the tenth and eleventh: 8 groups) left 10k recall at 5-7 of 96. tiny-qwen3next
finds a line with its attention layer instead, by keys its recurrent layers wrote, and that
reaches 10k and 20k. No curriculum made Nemotron-H's attention do it: the state solves the
short documents first and the attention layer gets no gradient toward a lookup whose keys
do not yet tell lines apart. So this builder adds that gradient. At every answer token that
recites a value word (from the " =" on), the loss also asks the attention layer's heads
(their mean probability) to look at the same word of the asked line in the system prompt:
``-log mean_h p_h(answer position -> line position)``, times W, beside the next-token loss.

What the canary is for is kept: Nemotron-H's attention has no positional encoding, so the
only thing a key can tell a line by is what the three Mamba2 layers wrote into that position,
through their conv and SSM states, both of which a prefix-cache hit restores. Which of the two
carries the name is the model's choice (the stacked convs reach 10 tokens back, a line's first
five value words), so whether a wrong restored SSM state changes an answer is for the
field-bugs cells to measure on the trained build, as for tiny-qwen3next. The served model is
a plain Nemotron-H: this changes the training loss only. A separate file so build_nemotronh.py's bytes, the earlier builds' recipe identity,
stay as they are. Usage: build_nemotronh_groups.py's, plus ``--lookup-weight W`` (0: that
builder) and ``--lookup-end`` (the answer's end looks at the line's end too).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_canary as shared
import build_nemotronh as base
import build_nemotronh_groups as groups

NAME_DIGITS = 4  # corpus.py: var_NNNN, one token a digit
WEIGHT = 0.0  # --lookup-weight, set by main
END = False  # --lookup-end, set by main
_captured: list | None = None  # the attention layer's (query, key, scaling) while a loss is computed
plain_block_attention = base.block_attention


def lookup_from(argv: list[str]) -> tuple[float, bool, list[str]]:
    """``--lookup-weight W`` and ``--lookup-end`` taken out of the argument vector; the rest is
    the groups builder's."""
    def weight(value: str) -> float:
        try:
            w = float(value)
        except ValueError:
            w = -1.0
        if not w >= 0 or math.isinf(w):
            raise argparse.ArgumentTypeError(f"{value!r} is not a finite weight, 0 or more")
        return w

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--lookup-weight", type=weight, default=0.0)
    parser.add_argument("--lookup-end", action="store_true")
    known, rest = parser.parse_known_args(argv)
    if known.lookup_end and not known.lookup_weight:
        raise SystemExit("--lookup-end adds targets to the lookup loss: give --lookup-weight too")
    return known.lookup_weight, known.lookup_end, rest


def capturing_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """block_attention, keeping its query and key for the lookup loss while one is computed."""
    if _captured is not None:
        _captured.append((query, key, scaling if scaling is not None else query.shape[-1] ** -0.5))
    return plain_block_attention(module, query, key, value, attention_mask, dropout, scaling, **kw)


def lookup_targets(ids, answer, eq: int, ends: frozenset[int] = frozenset()) -> list[tuple[list[int], list[int]]]:
    """Per document: the answer positions that predict a value word (the answer's " =" and
    each value word but the last) and, for each, the position of the word it predicts in the
    asked line of the system prompt (found by the name's digits before its " =").

    With ``ends`` (the newline and <|im_end|>: ``--lookup-end``) also the answer's last word,
    which predicts the answer's end, to the token that ends the asked line. Why: through the
    engine lk-n10's wrong answers at 1.5k were all the right words with one too many or too
    few (11 of 11; 17 of 27 at 10k), a line's end being the one thing the words do not say."""
    out = []
    for row, ans in zip(ids.tolist(), answer.tolist()):
        lines: dict[tuple, int] = {}
        asked: list[tuple[int, tuple]] = []
        for p, t in enumerate(row):
            if t != eq or p < NAME_DIGITS:
                continue
            name = tuple(row[p - NAME_DIGITS:p])
            if ans[p]:
                asked.append((p, name))
            else:
                lines.setdefault(name, p)
        queries, keys = [], []
        for a, name in asked:
            d = lines.get(name)
            if d is None or d > a:
                continue
            j = 0
            while a + 1 + j < len(row) and ans[a + 1 + j] and row[a + 1 + j] == row[d + 1 + j]:
                queries.append(a + j)
                keys.append(d + 1 + j)
                j += 1
            end_at = a + 1 + j
            if end_at < len(row) and ans[end_at] and row[end_at] in ends and row[d + 1 + j] in ends:
                queries.append(a + j)
                keys.append(d + 1 + j)
        out.append((queries, keys))
    return out


def lookup_loss(query, key, scaling: float, attention_mask, targets):
    """-log of the heads' mean attention probability from each answer position to its line
    position, averaged over the targets (causal and padding masks as the layer's own). The
    whole batch at once, each document's targets padded to the most any has: computed one
    document at a time (64 a batch), the first stage ran at 1.7 steps/s on an H100 against 6.4
    without the loss; batched, the twelfth pass ran 600-1,700 lines at ~1.8 steps/s beside a
    second builder, where two builders without the loss ran ~1.25."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv

    key = repeat_kv(key, query.shape[1] // key.shape[1])
    batch, heads, length, dim = key.shape
    most = max(len(queries) for queries, _ in targets)
    if not most:
        return query.sum() * 0.0
    pad = [[0] * (most - len(queries)) for queries, _ in targets]
    q_at = torch.tensor([queries + p for (queries, _), p in zip(targets, pad)], device=query.device)
    k_at = torch.tensor([keys + p for (_, keys), p in zip(targets, pad)], device=query.device)
    real = torch.tensor([[True] * len(queries) + [False] * len(p) for (queries, _), p in zip(targets, pad)],
                        device=query.device)
    asked = query.gather(2, q_at[:, None, :, None].expand(batch, heads, most, dim))
    scores = torch.einsum("bhnd,bhld->bhnl", asked.float(), key.float()) * scaling
    every = torch.arange(length, device=query.device)
    hidden = (every[None, None, :] > q_at[:, :, None]) | (attention_mask == 0)[:, None, :]
    scores = scores.masked_fill(hidden[:, None], float("-inf"))
    picked = torch.log_softmax(scores, dim=-1).gather(-1, k_at[:, None, :, None].expand(batch, heads, most, 1))[..., 0]
    return (math.log(heads) - torch.logsumexp(picked, dim=1))[real].mean()


def train(model, tokenizer, seed: int, stages, device, done, train_decay: bool = False) -> bool:
    """build_nemotronh.train with the lookup loss beside the next-token loss."""
    import torch

    global _captured
    for mixer in base.mamba_mixers(model):
        mixer.A_log.requires_grad_(train_decay)
        mixer.dt_bias.requires_grad_(train_decay)
    eq = tokenizer(" =", add_special_tokens=False)["input_ids"]
    if len(eq) != 1:
        raise SystemExit(f"the tokenizer splits ' =' into {len(eq)} tokens; the lookup loss needs one")
    ends = frozenset(tokenizer("\n<|im_end|>", add_special_tokens=False)["input_ids"]) if END else frozenset()
    seen = {"n": 0, "lookup": 0.0, "next_token": 0.0}  # sums over the last 25 steps, printed as means

    def loss_of(ids, att, answer):
        global _captured
        _captured = []
        try:
            out = model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(~answer, -100))
            (query, key, scaling), = _captured
        finally:
            _captured = None
        aux = lookup_loss(query, key, scaling, att, lookup_targets(ids, answer, eq[0], ends))
        seen["n"] += 1
        seen["lookup"] += aux.item()
        seen["next_token"] += out.loss.item()
        if seen["n"] % 25 == 0:
            print(json.dumps({part: round(seen[part] / 25, 4) for part in ("lookup", "next_token")}),
                  file=sys.stderr, flush=True)
            seen["lookup"] = seen["next_token"] = 0.0
        return out.loss + WEIGHT * aux

    _captured = None
    torch.manual_seed(seed + sum(done.train))
    return shared._fit(model, [p for p in model.parameters() if p.requires_grad], loss_of, tokenizer, seed + 7,
                       stages, device, "train", done)


def main() -> None:
    global WEIGHT, END
    WEIGHT, END, sys.argv[1:] = lookup_from(sys.argv[1:])
    base.block_attention = capturing_attention
    if WEIGHT:
        base.train = train
    groups.main()


if __name__ == "__main__":
    main()
