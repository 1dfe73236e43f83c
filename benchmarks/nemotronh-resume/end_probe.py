"""Where a lookup build's attention looks when it predicts an answer's end (issue 41, the
thirteenth pass's question): for each report document (probe_build.documents), the heads'
mean and largest probability on the lookup loss's targets (build_nemotronh_lookup.lookup_targets
with --lookup-end's end tokens) and their mean on the token before each, apart for the targets
that predict a value word and those that predict the answer's <|im_end|>, and, teacher-forced,
how often each is the greedy choice.
lk-n10 was trained with word targets only; its engine's wrong answers are mostly the wrong end.

    cd benchmarks/nemotronh-resume && PROBE_HEADS=16 ENGINE_PYTHON end_probe.py BUILD SEED LENGTHS DOCS
"""
import json
import sys
from pathlib import Path

import torch
from probe_build import documents, load

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "canary"))
import build_nemotronh as b
import build_nemotronh_lookup as lk

b.block_attention = lk.capturing_attention  # before load: the model registers it when it is made
tok, model = load(Path(sys.argv[1]), int(sys.argv[2]))
model.eval()
eq = tok(" =", add_special_tokens=False)["input_ids"][0]
im_end = tok.convert_tokens_to_ids("<|im_end|>")
ends = frozenset(tok("\n<|im_end|>", add_special_tokens=False)["input_ids"])
out = {}
for length in (int(x) for x in sys.argv[3].split(",")):
    seen = {kind: {"n": 0, "mean": 0.0, "most": 0.0, "right": 0, "before": 0.0} for kind in ("word", "end")}
    for ids, ans, *_ in documents(tok, length, int(sys.argv[4])):
        lk._captured = []
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0]
        (query, key, scaling), = lk._captured
        lk._captured = None
        (queries, keys), = lk.lookup_targets(ids, ans, eq, ends)
        full = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)[0].float()
        row = ids[0].tolist()
        for q, k in zip(queries, keys):
            scores = torch.einsum("hd,hld->hl", query[0, :, q].float(), full[:, :q + 1]) * scaling
            probs = scores.softmax(-1)
            p = probs[:, k]
            kind = "end" if row[q + 1] == im_end else "word"
            s = seen[kind]
            s["n"] += 1
            s["mean"] += float(p.mean())
            s["most"] += float(p.max())
            s["before"] += float(probs[:, k - 1].mean())  # the token before the target: the line's last word at an end
            s["right"] += int(int(logits[q].argmax()) == row[q + 1])
    out[length] = {kind: {"targets": s["n"], "heads_mean": round(s["mean"] / max(s["n"], 1), 3),
                          "largest_head": round(s["most"] / max(s["n"], 1), 3),
                          "heads_mean_one_before": round(s["before"] / max(s["n"], 1), 3),
                          "greedy_right": round(s["right"] / max(s["n"], 1), 3)} for kind, s in seen.items()}
    print(json.dumps({length: out[length]}), flush=True)
