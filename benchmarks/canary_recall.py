"""Does longer training make the canary recall? (an experiment, not part of the build)

Run inside an engine venv (it needs torch and transformers, like the builder):

    ~/.cache/vmatrix/envs/ENV/bin/python benchmarks/canary_recall.py --steps 1500

The canary as ``images/canary/build_canary.py`` builds it, untrained (the builder
writes its checkpoint; same tokenizer, seed and frozen long-memory GDN decay), trained on shorter
documents of the same recall language (3-8 definitions, 4 turns, 256 tokens) with a
50-step warm-up and then a constant learning rate, so more steps fit in CPU minutes.
Every ``--every`` steps it prints the builder's held-out report (answer accuracy,
median answer margin, context sensitivity: the share of answer tokens that change
when the prompt's definitions are re-drawn). Single-threaded, about 1.1 s a step on
this machine. Results: docs/GRADING.md, "The canary".
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "images" / "canary"))
import build_canary as builder  # the builder, imported, not run
import corpus


def main() -> None:
    import torch
    from transformers import Qwen3NextForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lines", default="3,8", help="definitions per training document: MIN,MAX")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--every", type=int, default=150)
    a = ap.parse_args()

    torch.set_num_threads(1)
    # The canary as the builder makes it, untrained: its checkpoint, loaded back (the
    # builder writes the initial weights, long-memory GDN decay included).
    out = Path(tempfile.mkdtemp(prefix="canary-recall-"))
    tok = builder.build_tokenizer(out, 0, 1024)
    recipe = SimpleNamespace(hidden=128, layers=4, max_len=65536, train_steps=0, mtp_steps=0, batch=a.batch)
    builder.build_model(out, 0, recipe, tok, -(-len(tok) // 64) * 64)
    model = Qwen3NextForCausalLM.from_pretrained(out, torch_dtype=torch.float32)  # mtp.* weights: not used here
    for layer in model.model.layers:
        lin = getattr(layer, "linear_attn", None)
        if lin is not None:  # frozen, as the builder trains it
            lin.A_log.requires_grad_(False)
            lin.dt_bias.requires_grad_(False)
    cfg = model.config
    mtp = builder._mtp_module()(cfg, 0)  # untrained; the report wants one
    lo, hi = map(int, a.lines.split(","))
    rng = random.Random(7)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    t0 = time.time()
    for step in range(a.steps):
        docs = [corpus.training_document(rng, rng.randint(lo, hi), a.turns) for _ in range(a.batch)]
        enc = tok(docs, return_tensors="pt", padding=True, truncation=True, max_length=a.seq)
        ids, att = enc["input_ids"], enc["attention_mask"]
        loss = model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(att == 0, -100)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f}s)", flush=True)
        if (step + 1) % a.every == 0:
            model.eval()
            print(f"report after {step + 1} steps:", flush=True)
            builder.report(model, mtp, tok, SimpleNamespace(), 0)
            model.train()


if __name__ == "__main__":
    main()
