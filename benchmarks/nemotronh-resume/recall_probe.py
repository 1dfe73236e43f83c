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
import sys
from pathlib import Path

import torch
from probe_build import answers, documents, load

torch.set_num_threads(1)
tok, model = load(Path(sys.argv[1]), int(sys.argv[2]))
model.config._attn_implementation = "eager"  # attention weights, for where it looks
for layer in model.model.layers:
    if hasattr(layer.mixer, "config"):
        layer.mixer.config._attn_implementation = "eager"
model.eval()
stats = {}
looks: dict[str, list[float]] = {}


def add(key, field, ok):
    s = stats.setdefault(key, {"n": 0, "name": 0, "first": 0, "rest": 0, "all": 0})
    s[field] += ok


for length in [int(x) for x in sys.argv[3].split(",")]:
    for ids, ans, lines, asked, line_of in documents(tok, length, int(sys.argv[4])):
        with torch.no_grad():
            o = model(input_ids=ids, output_attentions=True)
        logits = o.logits[0, :-1]
        attn = [a for a in o.attentions if a is not None][-1][0]  # heads x query x key
        line_of = torch.tensor(line_of)
        for t, k, j, eq, ok in answers(tok, ids, ans, logits):
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
