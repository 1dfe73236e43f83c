"""The engine processes vmatrix started on this host, as tests see them: each carries the
cell it serves in its environment (``CELL_ENV``, set by run_cell)."""

from __future__ import annotations

from pathlib import Path

from vmatrix.orchestrator.runtimes.engine import CELL_ENV


def tagged_engines() -> dict[int, str]:
    """pid -> cell id of every live engine process (tagged in its environment)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in env:
            if entry.startswith(CELL_ENV.encode() + b"="):
                found[int(proc.name)] = entry.split(b"=", 1)[1].decode()
    return found
