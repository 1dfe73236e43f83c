"""CPU seconds of one training step of a canary builder's model, at a curriculum stage's sizes.

For planning GPU time (images/canary/README.md, "tiny-nemotronh"): the same batches
(build_canary.Batches, same seed) through build_canary.py's Qwen3-Next model and
build_nemotronh.py's Nemotron-H model, forward + backward + AdamW, one thread. Process CPU
time, not wall time: the hosts this runs on are shared, and with one thread the CPU time a
step takes barely depends on what else runs. Run it in an engine venv (torch, transformers):

    python benchmarks/canary_step_time.py --stage 'lines=2-12 batch=64 steps=4000 lr=3e-3' --steps 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "images" / "canary"))
import build_canary
import build_nemotronh


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--stage", required=True, help="a build_canary --stage")
    p.add_argument("--steps", type=int, default=4, help="timed steps, after one untimed")
    p.add_argument("--models", default="qwen3next,nemotronh")
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    stage = build_canary.Stage.parse(a.stage)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_canary.build_tokenizer(Path(tmp), 1, 1024)
    vocab = -(-len(tokenizer) // 64) * 64
    batches = build_canary.Batches(tokenizer, 8, 0, stage, 0)
    for name in a.models.split(","):
        torch.manual_seed(1)
        if name == "qwen3next":
            model, _ = build_canary.new_model(argparse.Namespace(hidden=128, layers=4, max_len=131072), tokenizer, vocab)
        else:
            args = argparse.Namespace(hidden=128, pattern=build_nemotronh.PATTERN, mamba_heads=4, state=128, chunk=128,
                                      max_len=131072)
            model, _ = build_nemotronh.new_model(args, tokenizer, vocab)
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=stage.lr)
        model.train()
        seconds, tokens = [], []
        for k in range(a.steps + 1):
            ids, att, answer = batches[k]
            t0 = time.process_time()
            loss = model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(~answer, -100)).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k:  # the first step allocates and warms up
                seconds.append(time.process_time() - t0)
                tokens.append(int(ids.numel()))
        print(json.dumps({"model": name, "stage": a.stage, "cpu_seconds_per_step": round(sum(seconds) / len(seconds), 3),
                          "tokens_per_step": round(sum(tokens) / len(tokens)), "steps": len(seconds)}), flush=True)


if __name__ == "__main__":
    main()
