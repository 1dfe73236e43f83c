"""Drop from a wheel the files an offline H200 host never loads, so it travels in fewer uploads.

    python -m images.trim_wheel IN.whl OUT.whl [PREFIX ...]

Without PREFIXes, the cuts docs/GPU.md measured safe for vLLM's CUDA wheels on an H200
(0.25.1 and 0.26.0): FlashAttention 2 (the H200 runs FlashAttention 3), the Rust frontend
(off by default), DeepGEMM's builds for other Pythons, and the Blackwell FMHA headers. The
wheel's RECORD loses the same lines, so pip installs it without complaint. Standard library
only: the host has nothing else to run it with.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

H200_CUTS = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm-rs",
    "vllm/third_party/deep_gemm/_C.cpython-310-",
    "vllm/third_party/deep_gemm/_C.cpython-311-",
    "vllm/third_party/deep_gemm/_C.cpython-313-",
    "vllm/third_party/deep_gemm/_C.cpython-314-",
    "vllm/third_party/fmha_sm100/cutlass/",
)


def trim(src: Path, dest: Path, cuts: tuple[str, ...] = H200_CUTS) -> list[str]:
    """Write SRC less every entry starting with one of CUTS to DEST; return what was dropped."""
    dropped: list[str] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.startswith(cuts):
                dropped.append(info.filename)
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if not ln.startswith(cuts)).encode()
            zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return dropped


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    src, dest = Path(argv[0]), Path(argv[1])
    dropped = trim(src, dest, tuple(argv[2:]) or H200_CUTS)
    print(f"{dest}: {src.stat().st_size >> 20} MiB -> {dest.stat().st_size >> 20} MiB, {len(dropped)} files dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
