"""What every `vmatrix` command shares: consoles, the --db option, one-line errors."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from vmatrix.errors import VmatrixError
from vmatrix.orchestrator.paths import cache_dir, default_db

if TYPE_CHECKING:
    from vmatrix.db.reads import Readable
    from vmatrix.db.store import Store

console = Console()
err = Console(stderr=True)

# A str, not a Path: Path would fold the "//" of a URL such as postgresql+psycopg://host/db.
DB_HELP = "Results database: a SQLite file path or a SQLAlchemy URL, e.g. postgresql+psycopg://host/vmatrix " \
          "(default: a file in the user data dir). A NAME.db.xz is read from an unpacked copy; commands that " \
          "write refuse it."
DbOpt = Annotated[str | None, typer.Option("--db", help=DB_HELP)]
IndexOpt = Annotated[str | None, typer.Option(
    "--index-url", help="Resolve release ranges (`vllm: \">=0.30\"`, `latest`) against this index, a mirror, "
                        "and install engines from it; default: pip's configured index (or $VMATRIX_INDEX_URL).")]


def use_index(index_url: str | None) -> None:
    """--index-url for this process and the engine installs it starts (local Ray workers
    inherit the environment)."""
    import os

    from vmatrix.orchestrator.stack.versions import INDEX_ENV

    if index_url:
        os.environ[INDEX_ENV] = index_url


def fail(message: str) -> NoReturn:
    """One line on stderr and exit code 2: never a traceback for the user's mistakes.

    Text, not markup: messages quote signatures and knob values that may hold "[...]";
    soft_wrap keeps Rich from breaking the line at the terminal width.
    """
    err.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def flag(field: str) -> str:
    """The option that sets an input the library names by field: wheel_url -> --wheel-url."""
    return "--" + field.replace("_", "-")


def error_line(exc: VmatrixError) -> str:
    """A library error as the user reads it: the inputs it names spelled as this CLI's flags."""
    return exc.spelled(flag)


class Commands(TyperGroup):
    """Every command group of `vmatrix`: a :class:`~vmatrix.errors.VmatrixError` from any
    command is one line on stderr and exit code 2, caught here once."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except VmatrixError as exc:
            fail(error_line(exc))


def open_store(db: str | Path | None, *, write: bool) -> Store:
    """The store at ``db`` (path or URL); one that cannot be used is a one-line error.

    Every command says whether it writes. One that only reads never changes the file it
    names: an xz archive (``NAME.db.xz``) is read from its unpacked copy, and a store
    behind the newest migration from a migrated copy, both in the cache
    (:func:`vmatrix.db.copies.for_reading`), and a file that is not there is an error, not
    a new empty store (:func:`readable`). One that writes opens ``db`` itself, creating it
    or migrating it if it is behind; an archive is refused (read-only: decompress it to write).
    """
    from vmatrix.db.store import Store

    return Store.open((db or default_db()) if write else readable(db), migrate=write)


def readable(db: str | Path | None) -> str | Path:
    """What a read-only command opens for ``db``: itself, or its copy in the cache.

    A ``--db`` file (or archive) that is not there is a one-line error naming it
    (``StoreError``, from :func:`~vmatrix.db.copies.for_reading`): a mistyped path must
    not become an empty store that reports nothing. Without ``--db``, the default store
    before anything has been recorded is opened (created empty) as before: it is where
    ``sweep run`` writes, so an empty answer there is the truth.
    """
    from vmatrix.db.copies import for_reading

    if not db:
        db = default_db()
        if not db.exists():
            return db
    return for_reading(db, lambda: cache_dir() / "dbs")


def open_for_reading(db: str | Path | None) -> Readable:
    """What the read-only commands `results table` and `results compare` read from.

    A SQLite store already at the newest migration (the file, or its copy: see
    :func:`open_store`) is read with the standard library's sqlite3 (``db/reads.py``):
    importing SQLAlchemy would cost those commands more than their queries. Anything else
    (PostgreSQL, the default store not made yet, a file that is not a store) goes through
    :meth:`Store.open`, as every other command does.
    """
    from vmatrix.db.reads import open_sqlite_at_head

    target = readable(db)
    found = open_sqlite_at_head(target)
    if found is not None:
        return found
    from vmatrix.db.store import Store  # SQLAlchemy: only when the file is not read through sqlite3

    return Store.open(target, migrate=False)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a read-only command's body.

    `results table` and `results compare` build tens of thousands of objects that all
    stay alive until the process exits (cells, knob dicts, pairs, intervals); each
    allocation burst made the collector traverse them and every imported module's
    objects again, for nothing (measured: table 0.97 -> 0.82 s, compare 2.41 -> 1.83 s;
    peak memory unchanged: the data are acyclic). Re-enabled afterwards, so a command
    run in-process (tests, CliRunner) leaves the collector as it found it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
