"""Peak memory of one tiny-nemotronh training step, sdpa's attention against the builder's
``block_attention``, at the lengths of the curriculum's long stages.

Why (issue 41): the sixth pass's h16-s1 died at its first 600-1,700-line step (10k-token
documents, batch 2) asking the GPU for 14.00 GiB, and the eighth pass trains that stage.
One step (forward, backward) of h16-s1's architecture on a padded batch of two documents of
LENGTH tokens (random token ids: memory depends on shapes only), each implementation in a
fresh process, on the CPU. Three arms: sdpa as the CPU runs it (its flash kernel takes a mask
here, in O(length) memory); sdpa held to its math kernel, which is what the sixth pass's CUDA
step ran (its out-of-memory error asked for 14.00 GiB, batch x heads x length^2 float32
scores, at ~21.7k tokens: the math backward's gradient of the scores); and the builder's
``block_attention``. Reports the process's peak resident memory over an idle process of the same imports
and model (so weights, imports and allocator pools are subtracted), and the step's seconds.
Run it in an engine venv (torch, transformers):

    python benchmarks/nemotronh_attention_memory.py --lengths 2048,4096,6144
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

CANARY = Path(__file__).resolve().parent.parent / "images" / "canary"


def step(impl: str, length: int, heads: int) -> dict:
    """One forward + backward with ``impl`` ('none': build the model only); the peak RSS."""
    sys.path.insert(0, str(CANARY))
    import build_nemotronh
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    args = types.SimpleNamespace(pattern="M-M-M-*-", hidden=128, state=128, mamba_heads=heads, chunk=128,
                                 max_len=131072, decay="long")
    tokenizer = types.SimpleNamespace(convert_tokens_to_ids=lambda _: 1)
    model, _ = build_nemotronh.new_model(args, tokenizer, 1024)
    seconds = 0.0
    if impl != "none":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        math = impl == "sdpa-math"
        model.set_attn_implementation("sdpa" if math else impl)
        ids = torch.randint(2, 1000, (2, length))
        att = torch.ones_like(ids)
        att[1, length * 3 // 4:] = 0  # the second document shorter: padded, as a batch of two is
        t0 = time.perf_counter()
        with sdpa_kernel([SDPBackend.MATH]) if math else contextlib.nullcontext():
            model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(att == 0, -100)).loss.backward()
        seconds = time.perf_counter() - t0
    return {"impl": impl, "length": length, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "seconds": round(seconds, 2)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="2048,4096,6144", help="padded tokens a document")
    p.add_argument("--mamba-heads", type=int, default=16, help="h16-s1's")
    p.add_argument("--one", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(step(a.one[0], int(a.one[1]), a.mamba_heads)))
        return

    def fresh(impl: str, length: int) -> dict:
        out = subprocess.run([sys.executable, __file__, "--mamba-heads", str(a.mamba_heads), "--one", impl,
                              str(length)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    idle = fresh("none", 0)["peak_mib"]
    print(f"model built, no step: {idle:.0f} MiB resident; below, a step's peak over that")
    arms = ("sdpa", "sdpa-math", "vmatrix_blocks")
    print("| tokens a document (batch 2) | " + " | ".join(f"{arm}: peak MiB, s" for arm in arms) + " |")
    print("|---" * (len(arms) + 1) + "|")
    for length in (int(x) for x in a.lengths.split(",")):
        got = [fresh(arm, length) for arm in arms]
        print(f"| {length} | " + " | ".join(f"{g['peak_mib'] - idle:.0f}, {g['seconds']}" for g in got) + " |",
              flush=True)


if __name__ == "__main__":
    main()
