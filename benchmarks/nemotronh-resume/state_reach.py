"""How much of an asked line is left in each Mamba2 layer's state when the question is read?
The lookup by name goes through the state (recall_probe.py), and a Mamba2 state forgets each
token by exp(A * dt) a head (A = -exp(A_log), dt = softplus(projection + dt_bias), both the
build's own, input-dependent). Per asked line, teacher-forced, float32, CPU: the first value
word right or not, the line's distance from the question's " =" in tokens, and per layer the
largest (over heads) fraction of what the line wrote that survives to that " =" (the product
of every decay between them; log10). If far lines are lost by the decay alone, more training
at that length cannot bring them back through the state. Documents as recall_probe.py draws
them (4 turns).

    PROBE_HEADS=16 python benchmarks/nemotronh-resume/state_reach.py BUILD_FOLDER SEED 1500,10000 4
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from probe_build import answers, b, documents, load
from transformers.models.nemotron_h import modeling_nemotron_h as mod

torch.set_num_threads(int(os.environ.get("PROBE_THREADS", "1")))
tok, model = load(Path(sys.argv[1]), int(sys.argv[2]))
model.eval()

log_decays: list[torch.Tensor] = []  # per layer: (length, heads), log of each token's decay
writes: list[torch.Tensor] = []  # per layer: (length, heads), dt: how strongly each token is written


def recording_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False,
                   dt_limit=(0.0, float("inf")), **kw):
    d = dt + dt_bias.to(dt.dtype) if dt_bias is not None else dt
    d = F.softplus(d) if dt_softplus else d
    d = torch.clamp(d, min=dt_limit[0], max=dt_limit[1]).float()
    log_decays.append((A.float() * d)[0])
    writes.append(d[0])
    return b.chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias, dt_softplus=dt_softplus,
                        dt_limit=dt_limit, **kw)


mod.mamba2_chunk_scan = recording_scan
EDGES = [(500, "<=500"), (1500, "<=1.5k"), (4000, "<=4k"), (10**9, ">4k")]
rows = []
for length in [int(x) for x in sys.argv[3].split(",")]:
    for ids, ans, lines, asked, line_of in documents(tok, length, int(sys.argv[4])):
        log_decays.clear(); writes.clear()
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1]
        cum = [torch.cumsum(ld, 0) for ld in log_decays]  # per layer (length, heads)
        for t, k, j, eq, ok in answers(tok, ids, ans, logits):
            if k + eq + 1 >= j:
                continue
            q = k + eq + 1  # the input position whose logits predict the first value word
            end = max(p for p, lo in enumerate(line_of) if lo == asked[t] + 3)  # the line's last token
            reach = [float((c[q] - c[end]).max()) / 2.302585 for c in cum]  # log10, best head
            # Each token's weight in the state at q (dt_s * its decay since), per head; the asked
            # line's share of the whole, times the number of lines: 1 is a state holding every
            # line alike, a memory of `lines` associations in one key space.
            start = min(p for p, lo in enumerate(line_of) if lo == asked[t] + 3)
            share = []
            for c, w in zip(cum, writes):
                weight = w[: q + 1] * torch.exp(c[q] - c[: q + 1])
                share.append(float((weight[start:end + 1].sum(0) / weight.sum(0)).max()) * lines)
            rows.append((length, q - end, ok[k + eq + 1], reach, share))
for length in sorted({r[0] for r in rows}):
    mine = [r for r in rows if r[0] == length]
    for edge, label in EDGES:
        lo = max([e for e, _ in EDGES if e < edge], default=-1)
        got = [r for r in mine if lo < r[1] <= edge]
        if not got: continue
        med = [sorted(r[3][n] for r in got)[len(got) // 2] for n in range(len(got[0][3]))]
        share = [sorted(r[4][n] for r in got)[len(got) // 2] for n in range(len(got[0][4]))]
        print(f"L{length} tokens back {label}: n {len(got)}, first value word {sum(r[2] for r in got)}/{len(got)}, "
              f"log10 of the line's write left, best head, median by layer {[round(m, 1) for m in med]}, "
              f"its share of the state x lines, best head {[round(m, 1) for m in share]}")
    for r in sorted(mine, key=lambda r: r[1]):
        print(f"  L{length} back {r[1]:6d} first {'ok ' if r[2] else 'bad'} reach {[round(x, 1) for x in r[3]]} "
              f"share x lines {[round(x, 1) for x in r[4]]}")
