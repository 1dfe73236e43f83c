"""What a command that only reads a results DB opens, so that reading never changes the file.

Opening a SQLite file as a store (``Store.open``) migrates it when its schema is behind the
newest migration: a read would rewrite a recorded file (docs/runs ships DBs at older
revisions). And the largest recorded DBs are kept as ``NAME.db.xz`` (a checkout travels
with every call to a lent GPU host, and a call carries at most 64 MiB: docs/GPU.md), which
SQLite cannot open at all. :func:`for_reading` turns what ``--db`` names into what a read
opens:

* ``NAME.db.xz``: decompressed once into a cache folder named for the compressed file's
  digest (:func:`unpacked`; a changed file unpacks afresh). Such an archive is read-only:
  ``Store.open``, the one way to write, refuses it (:func:`refuse_archive`);
* a file behind the newest migration (or a foreign SQLite file): a copy migrated in the
  cache, named for the digest of what it was copied from and the head revision
  (:func:`migrated_copy`); the file itself keeps its bytes;
* a file that is not there (plain or archive): a one-line :class:`StoreError` naming it.
  A read must not create an empty store where a mistyped ``--db`` points (and then report
  nothing from it); only a command that writes creates one;
* anything else (a store at head, one that is not SQLite, a server URL) as it is:
  ``Store.open`` opens or reports it as before.

Every cached file is written to a ``.part`` of its own and renamed: whole or absent, when
two processes make it at once. A copy not read for :data:`KEEP_S` (14 days) is removed when
the next one is made (:func:`prune`). Only the standard library is imported here; migrating a
copy imports ``db.store`` (SQLAlchemy), which a store at head never needs.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vmatrix.db.reads import ARCHIVE_SUFFIX, is_archive, sqlite_path
from vmatrix.db.revision import HEAD_REVISION
from vmatrix.errors import StoreError


def digest(*paths: Path) -> str:
    """The first 16 hex digits of the sha256 of the files' bytes, one after the other."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:16]


def unpacked(packed: Path, folder: Path) -> Path:
    """``packed`` (``NAME.db.xz``) decompressed as ``folder/DIGEST/NAME.db``, DIGEST being the
    compressed file's: done once, reused while the file stays the same. The copy is as
    recorded (its schema unmigrated); open a copy of it, or :func:`migrated_copy`, to write."""
    out = folder / digest(packed) / packed.name.removesuffix(ARCHIVE_SUFFIX)

    def write(part: Path) -> None:
        with lzma.open(packed) as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    return _made(out, write)


def needs_migrating(path: Path) -> bool:
    """Whether opening the SQLite file ``path`` as a store would migrate it: it holds tables
    and its ``alembic_version`` is not :data:`HEAD_REVISION`. An empty file (a store to
    create), one that is not there and one that is not SQLite (``Store.open`` reports it)
    do not count. Only reads: the file's bytes stay as they are."""
    if not path.is_file():
        return False
    try:
        # Not ``mode=ro``: a read-only connection to a WAL store leaves its -wal and -shm
        # files behind; the last plain one to close removes them.
        conn = sqlite3.connect(path, timeout=30)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                return False
            if "alembic_version" not in tables:
                return True  # someone else's tables: a store would be created among them
            versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return versions != [(HEAD_REVISION,)]


def migrated_copy(path: Path, folder: Path) -> Path:
    """A copy of the SQLite store ``path`` migrated to the head revision, as
    ``folder/DIGEST-at-HEAD/NAME``: made once per content of ``path`` (its write-ahead log
    included) and per head; ``path`` itself is only read."""
    wal = path.with_name(path.name + "-wal")
    sources = [path, wal] if wal.is_file() else [path]
    out = folder / f"{digest(*sources)}-at-{HEAD_REVISION}" / path.name

    def write(part: Path) -> None:
        # SQLite's backup reads one consistent snapshot, write-ahead log included.
        src = sqlite3.connect(path, timeout=30)
        dst = sqlite3.connect(part)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        from vmatrix.db.store import Store

        Store.open(part).close()
        # Everything in the file itself before it is renamed: no -wal may stay behind.
        conn = sqlite3.connect(part)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    return _made(out, write)


def for_reading(db: str | Path, cache: Path | Callable[[], Path]) -> str | Path:
    """What a command that only reads ``db`` (a path or URL, as ``--db`` gives it) opens:
    ``db`` itself, or a copy under ``cache`` (an archive unpacked, a store behind head
    migrated). Opening the answer with ``Store.open`` leaves ``db``'s bytes unchanged, and
    creates nothing: a SQLite file (or archive) that is not there is a :class:`StoreError`.
    ``cache`` may be a function, called only when a copy is made: a store at head is read
    without finding the cache folder (platformdirs is an import a read should not pay)."""
    def folder() -> Path:
        return cache() if callable(cache) else cache

    path = sqlite_path(db)
    if path is None:
        return db  # a server: nothing to copy
    if not path.exists():
        raise StoreError("{db} {shown}: no such file", shown=str(db))
    if is_archive(path):
        try:
            plain = unpacked(path, folder())
        except (OSError, lzma.LZMAError, EOFError) as exc:
            raise StoreError("{db} {shown}: cannot decompress it ({why})", shown=str(db), why=str(exc)) from None
        return migrated_copy(plain, folder()) if needs_migrating(plain) else plain
    if path.is_file() and needs_migrating(path):
        return migrated_copy(path, folder())
    return db  # as it is: at head, or not a store (Store.open says so)


def _made(out: Path, write: Callable[[Path], None]) -> Path:
    """``out``, made by ``write`` into a ``.part`` of this process's beside it and renamed
    into place unless another process got there first."""
    if out.is_file():
        os.utime(out.parent)  # read now: kept by prune() for another KEEP_S
        return out
    prune(out.parent.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f"{out.name}.", suffix=".part")
    os.close(fd)
    part = Path(name)
    try:
        write(part)
        part.replace(out)
    finally:
        for leftover in (part, part.with_name(part.name + "-wal"), part.with_name(part.name + "-shm")):
            leftover.unlink(missing_ok=True)
    return out


# How long a copy nobody read is kept. Copies are named for the digest of what they were
# made from, so a DB that changes (a sweep appended, an archive re-recorded) leaves its
# older copies behind; without a bound the cache grows by a copy per change.
KEEP_S = 14 * 86400


def prune(folder: Path, keep_s: float = KEEP_S) -> list[Path]:
    """Remove the copies under ``folder`` (one sub-folder each) not read for ``keep_s``
    seconds (each read touches its folder); what was removed. Run before a new copy is made.
    A folder a process is writing into right now has a fresh mtime, so it stays."""
    removed = []
    now = time.time()
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            stale = entry.is_dir() and now - entry.stat().st_mtime > keep_s
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
