"""Does longer training make the canary recall? (an experiment, not part of the build)

Run inside an engine venv (it needs torch and transformers, like the builder):

    ~/.cache/vmatrix/envs/ENV/bin/python benchmarks/canary_recall.py --steps 1500

The canary's architecture and initialisation as ``images/canary/build_canary.py``
builds it (same tokenizer, seed, frozen long-memory GDN decay), trained on shorter
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
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

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
    tok = builder.build_tokenizer(Path(tempfile.mkdtemp(prefix="canary-recall-")), 0, 1024)
    torch.manual_seed(0)
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(4)]
    cfg = Qwen3NextConfig(
        vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=4, layer_types=layer_types,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_num_key_heads=1, linear_num_value_heads=2, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
        max_position_embeddings=65536, tie_word_embeddings=False,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen3NextForCausalLM(cfg).float()
    with torch.no_grad():
        for layer in model.model.layers:
            lin = getattr(layer, "linear_attn", None)
            if lin is not None:
                lin.A_log.copy_(torch.empty_like(lin.A_log).uniform_(0.005, 0.05).log())
                lin.dt_bias.zero_()
                lin.A_log.requires_grad_(False)
                lin.dt_bias.requires_grad_(False)
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
