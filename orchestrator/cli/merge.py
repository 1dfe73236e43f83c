"""``vmatrix results merge SRC [SRC ...] --db DEST``: one store from several (``db/merge.py``).

Each GPU lease brings back its own results DB; merged, their runs are queried, compared
and reused by ``vmatrix fixes`` as one store. A source is only read (a ``.db``, a
``NAME.db.xz`` archive or a URL, opened as every read-only command opens ``--db``); DEST is
written, created or migrated if it has to be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vmatrix.errors import MergeError, StoreError
from vmatrix.orchestrator.cli.common import DbOpt, console, fail, flag, open_store

if TYPE_CHECKING:
    from vmatrix.db.store import Store


def _spelled(exc: MergeError | StoreError, source: bool) -> str:
    """The error with a source's inputs named SRC (the argument), DEST's as --db."""
    return exc.spelled(lambda field: "SRC" if field == "src" or (source and field == "db") else flag(field))


def _shown(source: str) -> str:
    """A source as its lines name it: a file as given, a URL without its password."""
    if "://" not in source:
        return source
    from sqlalchemy.engine import make_url

    return make_url(source).render_as_string(hide_password=True)


def results_merge(
    src: Annotated[list[str], typer.Argument(
        show_default=False,
        help="Results DBs to copy from: a SQLite file, its NAME.db.xz or a SQLAlchemy URL; only read.")],
    db: DbOpt = None,
) -> None:
    """Copy every recorded result of each SRC into the store --db names (DEST), under DEST's ids.

    Sweeps, cells, runs with their requests and metrics, grades, noise floors, bisects, fixes
    and shrinks; DEST is created if missing. A result DEST already has is not added again,
    nothing in DEST is changed, and each SRC is one transaction. A cell stored with another
    spec in DEST (or in another SRC) stops the merge before anything is written.
    """
    from vmatrix.db.merge import merge_stores

    opened: list[tuple[str, Store]] = []
    for source in dict.fromkeys(src):  # a source named twice is merged once
        try:
            opened.append((_shown(source), open_store(source, write=False)))
        except StoreError as exc:
            fail(_spelled(exc, source=True))
    dest = open_store(db, write=True)
    try:
        for merged in merge_stores(dest, opened):
            console.print(merged.line(), highlight=False, soft_wrap=True)
    except MergeError as exc:
        fail(_spelled(exc, source=False))
    finally:
        dest.close()
        for _, store in opened:
            store.close()
