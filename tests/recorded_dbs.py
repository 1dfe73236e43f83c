"""The results DBs the project ships under docs/runs, some of them xz-compressed.

The largest are kept as ``NAME.db.xz``: the checkout travels with every call to the lent
GPU host, whose calls carry at most 64 MiB (docs/GPU.md). Tests read them all the same way:
``shipped()`` lists both kinds, ``unpacked(NAME)`` gives a readable ``NAME.db`` (the file
itself, or a decompressed copy in a temp folder shared by the session), ``copy_to``
puts a plain copy where a test may open (and so migrate) it, and ``read_only`` reads one
with sqlite3 leaving nothing beside it.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from vmatrix.db import copies

RUNS = Path(__file__).resolve().parent.parent / "docs" / "runs"


def shipped() -> list[Path]:
    """Every shipped DB, plain and compressed, by the name it reads as."""
    return sorted([*RUNS.glob("*.db"), *RUNS.glob("*.db.xz")], key=db_name)


def db_name(path: Path) -> str:
    return path.name.removesuffix(".xz")


def unpacked(name: str) -> Path:
    """``docs/runs/NAME`` readable as SQLite: itself, or its ``.xz`` decompressed once into a
    temp folder named for the compressed file's digest (a changed file unpacks afresh), the
    way ``--db NAME.db.xz`` is read (``vmatrix.db.copies.unpacked``).
    Open copies (``copy_to``), not this: opening a store migrates it."""
    plain = RUNS / name
    if plain.is_file():
        return plain
    packed = RUNS / f"{name}.xz"
    if not packed.is_file():
        raise FileNotFoundError(f"docs/runs/{name}: neither it nor {name}.xz is there")
    return copies.unpacked(packed, Path(tempfile.gettempdir()) / "vmatrix-recorded")


def copy_to(path: Path, folder: Path) -> Path:
    """A plain copy of a shipped DB (``path`` from ``shipped()``) in ``folder``."""
    dest = folder / db_name(path)
    shutil.copy(unpacked(db_name(path)), dest)
    return dest


def read_only(path: Path) -> sqlite3.Connection:
    """A sqlite3 connection reading ``path`` (from ``unpacked``) as it is, that leaves no file
    beside it: ``immutable=1`` takes no locks and makes no -wal or -shm. ``mode=ro`` is not
    enough: on a store in WAL mode (every shipped one) it creates both and leaves them there,
    next to the committed file (db/copies.py says the same of its own reads). Only for files
    nothing writes while they are read, as the shipped DBs."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
