"""A torch the offline host lacks, as an overlay folder put first on the engine's PYTHONPATH.

vLLM 0.27.0 and later pin ``torch==2.13.0``; the H200 host has torch 2.11.0+cu130 and no
network (docs/GPU.md). The overlay is torch, its triton, the CUDA libraries whose host
versions torch cannot use (NCCL 2.29.7: the host's 2.28.9 lacks 8 symbols that
``libtorch_cuda.so`` needs, shared/ENGINES.md) and torchvision, installed into one folder
(``--no-deps --target`` style: torch's RPATH finds ``nvidia/nccl/lib`` beside it). Only the
engine sees it: the orchestrator and the host keep their own torch.

    python -m vmatrix.images.overlay build DEST WHEEL ... [--sm 90] [--cut PREFIX ...] [--env K=V ...]
    python -m vmatrix.images.overlay check OVERLAY [--python PY]   (on the host: before any engine)
    python -m vmatrix.images.overlay import OVERLAY MODULE [--path DIR ...]
                                        (on the host: a compiled extension loads on the overlay's torch)

``build`` (here, with network) unpacks the wheels, drops what the engine never loads
(headers, Blackwell's ptxas, CUPTI) and blanks the GPU code of other architectures
(images/fatbin.py), and writes ``vmatrix-overlay.json``: what the folder holds, and the
environment the engine needs with it. ``check`` imports the overlay's torch in a fresh
interpreter, runs a matmul, a cuDNN convolution and a triton kernel on the GPU and reads
NCCL's version; its line is kept in ``.vmatrix-checked`` (a failure in ``.vmatrix-failed``),
and the engine environment refuses an overlay whose check failed. ``import`` loads one module
(LMCache's ``lmcache.cuda_ops``) as an engine on the overlay would see it, after torch, and
prints where both came from or the loader's error line. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from vmatrix.images.fatbin import blank_others

MANIFEST = "vmatrix-overlay.json"
CHECKED = ".vmatrix-checked"
FAILED = ".vmatrix-failed"
# What the engine never loads, measured on the H200 with torch 2.13.0 (shared/ENGINES.md):
# torch's C++ headers, Blackwell's ptxas, CUPTI (profiling) and triton's instrumentation
# test library, NCCL's headers. torch/bin stays: `import torch` needs torch_shm_manager.
CUTS = (
    "torch/include/",
    "triton/backends/nvidia/bin/ptxas-blackwell",
    "triton/backends/nvidia/lib/cupti/",
    "triton/instrumentation/",
    "nvidia/nccl/include/",
)
# The host's cuDNN is 9.19; torch 2.13.0 was built against 9.20 and refuses the older one
# in torch.backends.cudnn.version() unless told not to check (the convolution itself ran:
# shared/ENGINES.md). The check below runs cuDNN under this setting.
ENV = {"PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK": "1"}
_DATA = re.compile(r"^[^/]+\.data/(purelib|platlib|scripts|headers|data)/(.*)$")


def _targets(wheel: zipfile.ZipFile, cuts: tuple[str, ...]) -> list[tuple[zipfile.ZipInfo, str]]:
    """(member, path in the folder) for every file of ``wheel`` a ``--target`` install keeps."""
    out = []
    for info in wheel.infolist():
        if info.is_dir():
            continue
        name = info.filename
        if m := _DATA.match(name):
            if m.group(1) not in ("purelib", "platlib"):
                continue  # scripts and headers go outside site-packages: not on a PYTHONPATH
            name = m.group(2)
        if not name.startswith(cuts):
            out.append((info, name))
    return out


def _dist(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return name.replace("_", "-").lower(), version


def build(dest: Path, wheels: list[Path], sm: int = 90, cuts: tuple[str, ...] = CUTS,
          env: dict[str, str] | None = None) -> dict[str, object]:
    """Unpack ``wheels`` into ``dest`` less ``cuts``, blank the GPU code a GPU of ``sm``
    cannot load, and write the manifest; returns it."""
    dest.mkdir(parents=True, exist_ok=True)
    packages: dict[str, str] = {}
    blanked: dict[str, int] = {}
    for wheel in wheels:
        name, version = _dist(wheel)
        packages[name] = version
        with zipfile.ZipFile(wheel) as zf:
            for info, rel in _targets(zf, cuts):
                path = dest / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, path.open("wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                mode = (info.external_attr >> 16) & 0o777
                path.chmod(mode | 0o644 if mode else 0o644)
                if ".so" in path.name and (n := blank_others(path, sm)):
                    blanked[rel] = n
    if "torch" not in packages:
        raise ValueError("an overlay without a torch wheel")
    manifest: dict[str, object] = {
        "torch": packages["torch"], "packages": packages, "sm": sm, "cuts": list(cuts),
        "env": ENV if env is None else env, "blanked_bytes": blanked,
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def read(overlay: Path) -> dict[str, object]:
    """The overlay's manifest (ValueError if the folder is not an overlay)."""
    path = overlay / MANIFEST
    if not path.is_file():
        raise ValueError(f"{overlay} is not a torch overlay (no {MANIFEST})")
    return json.loads(path.read_text())


# Runs in a fresh interpreter with only the overlay in front of the host's packages: each
# line says what it reached, so a failure names the step (import, GPU, cuDNN, triton, NCCL).
_PROBE = r"""
import os, sys
overlay = os.path.realpath(sys.argv[1])
import torch
where = os.path.realpath(torch.__file__)
assert where.startswith(overlay + os.sep), f"torch {torch.__version__} imported from {where}, not the overlay"
assert torch.cuda.is_available(), f"torch {torch.__version__}: no CUDA device"
dev = torch.cuda.get_device_name(0)
a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
mm = float((a @ a).float().abs().sum())
conv = torch.nn.functional.conv2d(torch.randn(1, 3, 16, 16, device="cuda"), torch.randn(4, 3, 3, 3, device="cuda"))
cudnn = torch.backends.cudnn.version()
import triton, triton.language as tl
@triton.jit
def _add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)
x = torch.arange(1000, device="cuda", dtype=torch.float32)
out = torch.empty_like(x)
_add[(4,)](x, x, out, 1000, BLOCK=256)
assert torch.equal(out, 2 * x), "triton kernel gave a wrong sum"
nccl = ".".join(map(str, torch.cuda.nccl.version()))
print(f"torch {torch.__version__} (cuda {torch.version.cuda}) on {dev}: matmul {mm:.0f}, conv {tuple(conv.shape)}, "
      f"cuDNN {cudnn}, triton {triton.__version__}, NCCL {nccl}")
"""


def _probe(overlay: Path, argv: list[str], paths: tuple[Path, ...], timeout_s: float) -> tuple[bool, str]:
    """Run ``argv`` as the engine's environment on ``overlay`` would: the overlay first on
    PYTHONPATH (then ``paths``), the overlay's variables set. (ok, its last output line)."""
    manifest = read(overlay)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONPATH": os.pathsep.join(map(str, (overlay, *paths))), **manifest.get("env", {})}  # type: ignore[dict-item]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False, f"the check did not finish in {timeout_s:.0f} s"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else f"exit status {proc.returncode}"


def check(overlay: Path, python: str = sys.executable, timeout_s: float = 300) -> tuple[bool, str]:
    """Run the probe against ``overlay``; keep its line in the folder. (ok, line)."""
    # From a file, not -c: triton's @jit reads its function's source from the file.
    probe = overlay / ".vmatrix-probe.py"
    probe.write_text(_PROBE)
    ok, line = _probe(overlay, [python, str(probe), str(overlay)], (), timeout_s)
    (overlay / (CHECKED if ok else FAILED)).write_text(line + "\n")
    (overlay / (FAILED if ok else CHECKED)).unlink(missing_ok=True)
    return ok, line


# torch first, as the engine imports it: an extension finds libtorch and libc10 by their
# sonames among the libraries torch has loaded (LMCache's cuda_ops has no RPATH).
_IMPORT = r"""
import importlib, os, sys
import torch
mod = importlib.import_module(sys.argv[1])
print(f"{sys.argv[1]} loads on torch {torch.__version__} ({os.path.dirname(torch.__file__)}, "
      f"cuda {torch.cuda.is_available()}): {getattr(mod, '__file__', '?')}")
"""


def import_check(overlay: Path, module: str, paths: tuple[Path, ...] = (), python: str = sys.executable,
                 timeout_s: float = 300) -> tuple[bool, str]:
    """Import ``module`` after torch in a fresh interpreter on ``overlay``, ``paths`` after it on
    PYTHONPATH (where the module is installed). (ok, line): where both came from, or the
    loader's error (``ImportError: ...: undefined symbol: ...``)."""
    return _probe(overlay, [python, "-c", _IMPORT, module], paths, timeout_s)


def checked(overlay: Path) -> tuple[bool | None, str]:
    """The kept result of :func:`check`: (True, line), (False, line) or (None, '') if not run."""
    for name, ok in ((CHECKED, True), (FAILED, False)):
        if (overlay / name).is_file():
            return ok, (overlay / name).read_text().strip()
    return None, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vmatrix.images.overlay", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="unpack WHEELs into DEST, trimmed and blanked for one GPU architecture")
    b.add_argument("dest", type=Path)
    b.add_argument("wheels", type=Path, nargs="+")
    b.add_argument("--sm", type=int, default=90, help="the GPU's compute capability, 90 for the H200")
    b.add_argument("--cut", action="append", default=None, help="a path prefix to leave out (default: CUTS)")
    b.add_argument("--env", action="append", default=None, help="K=V the engine needs with it (default: ENV)")
    c = sub.add_parser("check", help="import the overlay's torch and use the GPU; keep the result")
    c.add_argument("overlay", type=Path)
    c.add_argument("--python", default=sys.executable)
    i = sub.add_parser("import", help="import MODULE after the overlay's torch, as the engine would")
    i.add_argument("overlay", type=Path)
    i.add_argument("module")
    i.add_argument("--path", type=Path, action="append", default=[], help="a folder after the overlay on PYTHONPATH")
    i.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        env = dict(kv.split("=", 1) for kv in args.env) if args.env is not None else None
        m = build(args.dest, args.wheels, args.sm, tuple(args.cut) if args.cut is not None else CUTS, env)
        blanked = sum(m["blanked_bytes"].values())  # type: ignore[union-attr]
        print(f"{args.dest}: torch {m['torch']}, {len(m['packages'])} packages, {blanked >> 20} MiB of other GPUs' code blanked")  # type: ignore[arg-type]
        return 0
    try:
        if args.cmd == "import":
            ok, line = import_check(args.overlay, args.module, tuple(args.path), args.python)
        else:
            ok, line = check(args.overlay, args.python)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    what = f"{args.module} on {args.overlay.name}" if args.cmd == "import" else "overlay"
    print(f"{what} {'ok' if ok else 'FAILED'}: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
