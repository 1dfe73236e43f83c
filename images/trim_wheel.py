"""Drop from a wheel the files an offline H200 host never loads, so it travels in fewer uploads.

    python -m vmatrix.images.trim_wheel IN.whl OUT.whl [PREFIX ...] [--sm 90] [--stored]

Without PREFIXes, the cuts docs/GPU.md measured safe for vLLM's CUDA wheels on an H200
(0.25.1 and 0.26.0): FlashAttention 2 (the H200 runs FlashAttention 3), the Rust frontend
(off by default), DeepGEMM's builds for other Pythons, and the Blackwell FMHA headers. The
wheel's RECORD loses the same lines, so pip installs it without complaint. Standard library
only: the host has nothing else to run it with.

``--sm 90`` also blanks, in every shared library of the wheel, the GPU code a GPU of that
compute capability cannot load (images/fatbin.py), and RECORD gets the libraries' new
hashes. ``--stored`` writes the wheel uncompressed: still a wheel pip and uv install, and
one that an xz volume (images/volumes.py) compresses far better than deflate's output.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import tempfile
import zipfile
from pathlib import Path

from vmatrix.images.fatbin import blank_others

H200_CUTS = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm-rs",
    "vllm/third_party/deep_gemm/_C.cpython-310-",
    "vllm/third_party/deep_gemm/_C.cpython-311-",
    "vllm/third_party/deep_gemm/_C.cpython-313-",
    "vllm/third_party/deep_gemm/_C.cpython-314-",
    "vllm/third_party/fmha_sm100/cutlass/",
)


def _blank(name: str, data: bytes, sm: int) -> bytes:
    """``data`` with the GPU code a GPU of ``sm`` cannot load zeroed (unchanged if none)."""
    with tempfile.NamedTemporaryFile(suffix=Path(name).name) as tmp:
        tmp.write(data)
        tmp.flush()
        if not blank_others(Path(tmp.name), sm):
            return data
        return Path(tmp.name).read_bytes()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim(src: Path, dest: Path, cuts: tuple[str, ...] = H200_CUTS, sm: int | None = None,
         stored: bool = False) -> list[str]:
    """Write SRC less every entry starting with one of CUTS to DEST; return what was dropped.

    With ``sm``, shared libraries lose the GPU code of other architectures (their RECORD
    lines follow); with ``stored``, DEST is not compressed."""
    dropped: list[str] = []
    changed: dict[str, str] = {}
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", method) as zout:
        record = None
        for info in zin.infolist():
            if info.filename.startswith(cuts):
                dropped.append(info.filename)
                continue
            if info.filename.endswith(".dist-info/RECORD"):
                record = info  # last: it lists the hashes of what was blanked
                continue
            data = zin.read(info)
            if sm is not None and ".so" in Path(info.filename).name:
                blanked = _blank(info.filename, data, sm)
                if blanked is not data:
                    data = blanked
                    changed[info.filename] = _record_line(info.filename, data)
            zout.writestr(info, data, compress_type=method)
        if record is not None:
            lines = zin.read(record).decode().splitlines(keepends=True)
            kept = [changed.get(ln.split(",")[0], ln.rstrip("\n")) + "\n" for ln in lines if not ln.startswith(cuts)]
            zout.writestr(record, "".join(kept).encode(), compress_type=method)
    return dropped


def main(argv: list[str]) -> int:
    stored = "--stored" in argv
    argv = [a for a in argv if a != "--stored"]
    sm = None
    if "--sm" in argv:
        at = argv.index("--sm")
        if at + 1 >= len(argv) or not argv[at + 1].isdigit():
            print("--sm needs a compute capability, e.g. 90", file=sys.stderr)
            return 2
        sm = int(argv[at + 1])
        del argv[at:at + 2]
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    src, dest = Path(argv[0]), Path(argv[1])
    dropped = trim(src, dest, tuple(argv[2:]) or H200_CUTS, sm, stored)
    print(f"{dest}: {src.stat().st_size >> 20} MiB -> {dest.stat().st_size >> 20} MiB, {len(dropped)} files dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
