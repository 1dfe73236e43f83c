"""The CUDA positive control (images/patches/corrupt-restored-state-cuda): it applies to
the two files of vLLM 0.25.1 and 0.26.0 it patches (pristine copies, gzipped, in
tests/data/vllm-cuda/), and the patched ``preprocess_mamba`` scales exactly the states
restored from the prefix cache. Fast: no engine, no GPU, no vLLM import (the function is
run on stand-ins for the runner's state)."""

from __future__ import annotations

import ast
import gzip
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vmatrix.images.recipe import patch_files

DATA = Path(__file__).resolve().parent / "data" / "vllm-cuda"
FILES = ("vllm/v1/worker/mamba_utils.py", "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py")
RELEASES = ("0.25.1", "0.26.0")
SET = "corrupt-restored-state-cuda"


def _site(tmp: Path, release: str, patched: bool) -> Path:
    site = tmp / release / ("patched" if patched else "pristine")
    for rel in FILES:
        dest = site / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gzip.decompress((DATA / release / f"{rel}.gz").read_bytes()))
    if patched:
        for f in patch_files(SET):  # what orchestrator/runtimes/venvs.py runs
            subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)],
                           check=True, capture_output=True, text=True)
    return site


def _preprocess(site: Path, calls: list) -> object:
    """``preprocess_mamba`` from SITE's mamba_utils.py, annotations dropped, its helpers stubbed."""
    tree = ast.parse((site / FILES[0]).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "preprocess_mamba")
    for a in fn.args.args:
        a.annotation = None
    fn.returns = None
    ns = {
        "cdiv": lambda a, b: -(-a // b),
        "cleanup_mamba_state_idx": lambda *_: None,
        "collect_mamba_copy_meta": lambda bufs, kv, funcs, gids, src, dst, *_: calls.append(("copy", src, dst)),
        "do_mamba_copy_block": lambda bufs: calls.append(("memcpy",)),
    }
    # The function under test, compiled from the patched file (vendored vLLM source).
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(site / FILES[0]), "exec"), ns)  # noqa: S102
    return ns["preprocess_mamba"]


class _State:
    """An SSM state pool: ``pool[block].mul_(f)`` records (block, f)."""

    def __init__(self) -> None:
        self.scaled: list[tuple[int, float]] = []

    def __getitem__(self, block: int) -> SimpleNamespace:
        return SimpleNamespace(mul_=lambda f: self.scaled.append((block, f)))


def _run(site: Path, layer_scale: float | None) -> tuple[_State, list]:
    calls: list = []
    ssm = _State()
    layer = SimpleNamespace(kv_cache=[_State(), ssm])
    if layer_scale is not None:
        layer.vmatrix_restored_state_scale = layer_scale
    block_size = 4
    requests = {
        # A prefix-cache hit: 8 tokens computed (blocks 0-1 cached), 3 scheduled.
        "hit": SimpleNamespace(num_computed_tokens=8, block_ids=[[10, 11, 12, 13]]),
        # A fresh request: nothing computed, nothing restored.
        "fresh": SimpleNamespace(num_computed_tokens=0, block_ids=[[20, 21]]),
        # The next chunk of a chunked prefill: the runner already has its state index.
        "chunk": SimpleNamespace(num_computed_tokens=4, block_ids=[[30, 31, 32]]),
    }
    _preprocess(site, calls)(
        SimpleNamespace(num_scheduled_tokens={"hit": 3, "fresh": 5, "chunk": 6}),
        SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=["gdn.0"])]),
        SimpleNamespace(enable_prefix_caching=True),
        {"chunk": 0},
        SimpleNamespace(req_ids=["hit", "fresh", "chunk"], num_accepted_tokens_cpu=[1, 1, 1]),
        requests,
        {"gdn.0": layer},
        (),
        SimpleNamespace(mamba_group_ids=[0], mamba_spec=SimpleNamespace(num_speculative_blocks=0, block_size=block_size),
                        offset=0),
    )
    return ssm, calls


pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


@pytest.mark.parametrize("release", RELEASES)
def test_the_set_applies_to_both_releases_and_flags_the_gdn_layers(tmp_path: Path, release: str) -> None:
    site = _site(tmp_path, release, patched=True)
    gdn = (site / FILES[1]).read_text()
    assert 'self.vmatrix_restored_state_scale = float(' in gdn
    assert '.get("vmatrix_carried_state_scale", 0.0)' in gdn
    for rel in FILES:
        compile((site / rel).read_text(), rel, "exec")


@pytest.mark.parametrize("release", RELEASES)
def test_only_the_state_restored_on_a_prefix_cache_hit_is_scaled(tmp_path: Path, release: str) -> None:
    ssm, calls = _run(_site(tmp_path, release, patched=True), layer_scale=0.0)
    # hit: state of block (8-1)//4 = 1 copied into block cdiv(11, 4) - 1 = 2 (id 12), then zeroed.
    # chunk: its own block 0 copied to block 2 (id 32) as always, not scaled: not a restore.
    assert ("copy", 1, 2) in calls and ("copy", 0, 2) in calls
    assert ssm.scaled == [(12, 0.0)]
    assert calls.index(("memcpy",)) == len(calls) - 1  # scaled after the copy landed, not before


@pytest.mark.parametrize("release", RELEASES)
def test_unflagged_layers_and_the_pristine_engine_are_left_alone(tmp_path: Path, release: str) -> None:
    assert _run(_site(tmp_path, release, patched=True), layer_scale=None)[0].scaled == []
    pristine, calls = _run(_site(tmp_path, release, patched=False), layer_scale=0.0)
    assert pristine.scaled == [] and ("copy", 1, 2) in calls
