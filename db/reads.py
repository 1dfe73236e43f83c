"""The reads `results table` and `results compare` need, as SQL text over a DB-API connection.

Why not SQLAlchemy here: importing it (core and ORM) costs ~0.6 s of a fresh process on
the project machine, more than the queries themselves on 10,000 cells, and these two
commands are meant to answer in under a second (docs/BENCHMARKS.md). So there is ONE
implementation of these queries, over a plain DB-API connection, which two things hand
out (:class:`Readable`):

* :class:`db.store.Store`, through SQLAlchemy's ``engine.raw_connection()``: SQLite and
  PostgreSQL (psycopg) alike, for every caller that already holds a store;
* :class:`SqliteFile`, stdlib ``sqlite3`` on a store file already at the newest
  migration (:func:`open_sqlite_at_head`), for the read-only CLI commands. A store behind
  head is opened through ``Store.open`` instead, which migrates it as always.

What differs between drivers is handled here: the placeholder (sqlite3 ``?``, psycopg
``%s``), JSON columns (text from sqlite3, already decoded from psycopg), BLOBs (bytes or
memoryview), and the JSON extraction operator.

This module imports nothing heavier than the standard library.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from vmatrix.cells import LEGACY_VERDICTS
from vmatrix.db.revision import HEAD_REVISION
from vmatrix.errors import StoreError

# The one definition of "a cell's latest run" and "a run's newest grade". Every read
# builds its ordering from these two: the raw SQL below, and the ORM's in db.models
# (latest_first, newest_grade_id), which db.store and db.queries use.
RUN_RECENCY = ("finished_at", "id")  # a cell's latest run: the greatest finished_at, ties by id
GRADE_RECENCY = "id"  # a run's newest grade: the greatest id (insertion order survives clock steps)


def latest_first_sql(alias: str) -> str:
    """``ORDER BY`` text putting ``alias``'s latest run first."""
    return ", ".join(f"{alias}.{column} DESC" for column in RUN_RECENCY)


def newest_grade_sql(run_id: str) -> str:
    """A scalar subquery: the id of the newest grade of the run whose id is ``run_id``."""
    return f"SELECT max(g2.{GRADE_RECENCY}) FROM grades AS g2 WHERE g2.run_id = {run_id}"


PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"



@dataclass(frozen=True)
class ReadConn:
    """A DB-API connection and what its driver needs to be spoken to."""

    conn: Any
    dialect: str  # "sqlite" or "postgresql"
    placeholder: str  # "?" (qmark) or "%s" (format/pyformat)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run ``sql``, written with ``?`` placeholders (and no other ``?`` or ``%``)."""
        if self.placeholder != "?":
            sql = sql.replace("?", self.placeholder)
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql, tuple(params))
            return cursor.fetchall()
        finally:
            cursor.close()


def placeholder_for(paramstyle: str) -> str:
    """The positional placeholder of a DB-API ``paramstyle``."""
    if paramstyle == "qmark":
        return "?"
    if paramstyle in ("format", "pyformat"):
        return "%s"  # pyformat drivers (psycopg) take positional %s as well
    raise ValueError(f"unsupported DB-API paramstyle {paramstyle!r}")


class Readable(Protocol):
    """What the read queries take: a :class:`db.store.Store` or a :class:`SqliteFile`."""

    def reader(self) -> Any:  # a context manager yielding a ReadConn
        ...


class SqliteFile:
    """A SQLite store at the newest migration, read through the standard library alone."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def reader(self) -> Iterator[ReadConn]:
        # The busy timeout as Store sets it: wait out a writer's lock instead of failing.
        # The store is in WAL mode already (a property of the file), so reads run
        # alongside the orchestrator's writes.
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            yield ReadConn(conn, "sqlite", "?")
        finally:
            conn.close()


def sqlite_path(db: str | Path) -> Path | None:
    """The file a ``--db`` names if it is SQLite (a path or a plain ``sqlite:///`` URL)."""
    if isinstance(db, str) and "://" in db:
        scheme, _, rest = db.partition("://")
        # sqlite:///relative or sqlite:////absolute, as SQLAlchemy reads them; anything
        # fancier (query options, in-memory) is left to Store.open.
        if scheme not in ("sqlite", "sqlite+pysqlite") or not rest.startswith("/") or "?" in rest:
            return None
        db = rest[1:]
        if not db:
            return None
    return Path(db).expanduser().resolve()


ARCHIVE_SUFFIX = ".xz"


def is_archive(db: str | Path) -> bool:
    """Whether ``db`` (a path or a ``sqlite:///`` URL) names an xz-compressed store."""
    path = sqlite_path(db)
    return path is not None and path.name.endswith(ARCHIVE_SUFFIX)


def refuse_archive(db: str | Path) -> None:
    """A one-line :class:`StoreError` if ``db`` is an archive: nothing writes into one (the
    store asks before it opens anything; db/copies.py reads an archive through a copy)."""
    if is_archive(db):
        raise StoreError("{db} {shown}: a read-only xz archive: decompress it to write to it (xz -dk {shown})",
                         shown=str(db))


def open_sqlite_at_head(db: str | Path) -> SqliteFile | None:
    """A :class:`SqliteFile` for ``db`` when it is an existing SQLite store whose
    ``alembic_version`` is :data:`HEAD_REVISION`; None otherwise (not SQLite, missing,
    older, unreadable: ``Store.open`` then creates, migrates or reports it)."""
    path = sqlite_path(db)
    if path is None or not path.is_file():
        return None
    try:
        conn = sqlite3.connect(path, timeout=30)
        try:
            versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return SqliteFile(path) if versions == [(HEAD_REVISION,)] else None


def chunks(ids: Iterable[int], size: int = 5000) -> Iterator[list[int]]:
    # Stay under SQLite's limit on parameters per statement (32,766 since 3.32) on any store.
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), size):
        yield unique[start : start + size]


def _in_list(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


def _json(value: Any) -> Any:
    """A JSON column's value: sqlite3 hands over text, psycopg the decoded object."""
    return json.loads(value) if isinstance(value, str) else value


# --- cells and their latest results ---------------------------------------------------


@dataclass(slots=True)
class CellResult:
    """A cell with its latest run's outcome, flat, for reads over many cells at once.

    Read-only by convention, not frozen: a frozen dataclass's ``__init__`` sets its 21
    fields through ``object.__setattr__``, ~8 us a cell against ~0.6 us here, and the
    lookup table builds 10,000 of them. (Never hashable either way: ``knobs`` is a dict.)
    """

    cell_id: str
    role: str | None  # "cell" or "control" in the sweep asked for; None across all sweeps
    engine: str
    vllm_version: str
    accelerator: str
    patches: str | None
    lmcache: str | None
    model_name: str
    model_digest: str
    workload_digest: str
    knobs: dict[str, Any]
    control_id: str | None
    run_id: int | None  # None: never run
    run_sweep_id: int | None
    status: str | None
    verdict: str | None
    grade_summary: str | None
    signature: str | None
    message: str | None
    log_path: str | None
    timings: dict[str, Any] | None

    @property
    def result(self) -> str:
        """What the lookup table calls this cell: verdict, else status, else not run."""
        return self.verdict or self.status or "not run"


_CELL_FIELDS = tuple(f.name for f in fields(CellResult))


def _creation_order(row: tuple[Any, ...]) -> tuple[Any, Any]:
    return row[21], row[0]


def cell_results(source: Readable, sweep_id: int | None = None, as_of_sweep: bool = False,
                 with_timings: bool = True, brief: bool = False) -> list[CellResult]:
    """Every cell (of one sweep, or all) with its latest run and that run's newest grade.

    By default a cell's latest run counts whichever sweep recorded it (cells are
    content-addressed, so it is the same experiment). ``as_of_sweep`` instead takes what
    ``sweep_id`` itself saw: only runs recorded by that sweep or an earlier one count,
    and the sweep's own run wins, even if a later one reran the cell; that is what
    comparing two sweeps needs. Without ``with_timings`` every ``timings`` is None:
    decoding them is a good part of the time on 10,000 cells, and only the report
    shows them. ``brief`` leaves out (None) what a comparison never shows: the cell's
    control, the run's sweep, signature, message and log path, the grade's summary
    (fewer Python objects out of sqlite3: ~0.01 s of a `results compare`).

    Both the latest run and the newest grade are correlated subqueries, one index probe
    each (``ix_runs_cell_id_finished_at``, read backwards; ``ix_grades_run_id``), not
    joins to ``GROUP BY`` subqueries: SQLite plans those well only when it guesses the
    outer side is small, and on 10,000 runs a wrong guess scans the grouped subquery
    once per run (seconds).
    """
    if as_of_sweep and sweep_id is None:
        raise ValueError("as_of_sweep needs a sweep_id")
    params: list[Any] = []
    latest = "SELECT r2.id FROM runs AS r2 WHERE r2.cell_id = cells.id"
    order = latest_first_sql("r2")
    if as_of_sweep:
        latest += " AND r2.sweep_id <= ?"
        params.append(sweep_id)
        order = "r2.sweep_id DESC, " + order
    sweep_join = ""
    if sweep_id is not None:
        sweep_join = "JOIN sweep_cells ON sweep_cells.cell_id = cells.id AND sweep_cells.sweep_id = ?"
        params.append(sweep_id)
    # The columns are CellResult's fields, in order, then the cell's creation time.
    control, run_sweep, summary, signature, message, log_path = (
        ("NULL",) * 6 if brief else
        ("cells.control_id", "runs.sweep_id", "grades.summary", "runs.signature", "runs.message", "runs.log_path"))
    sql = f"""
        SELECT cells.id, {"sweep_cells.role" if sweep_id is not None else "NULL"}, cells.engine_label,
               cells.vllm_version, cells.accelerator, cells.patches, cells.lmcache, cells.model_name,
               cells.model_digest, cells.workload_digest, cells.knobs, {control},
               runs.id, {run_sweep}, runs.status, grades.verdict, {summary}, {signature},
               {message}, {log_path}, {"runs.timings" if with_timings else "NULL"}, cells.created_at
        FROM cells
        LEFT OUTER JOIN runs ON runs.id = ({latest} ORDER BY {order} LIMIT 1)
        LEFT OUTER JOIN grades ON grades.id = ({newest_grade_sql("runs.id")})
        {sweep_join}
    """
    with source.reader() as rc:
        rows = rc.rows(sql, params)
    # In creation order (ties by id), sorted here rather than by ORDER BY: there is no
    # index on created_at, and SQLite's sorter copied every wide row into a temporary
    # B-tree (0.08 of 0.2 s on 10,000 cells). Ids are hex digests, so Python's string
    # order is every database's.
    rows.sort(key=_creation_order)
    # Knob sets repeat across engines: each distinct text is parsed once, and cells with
    # the same text share one dict (callers must not mutate it). Each result is built
    # from its row as is, then the columns that need decoding are replaced: one slice
    # instead of four, at 10,000 rows.
    knobs: dict[str, dict[str, Any]] = {}
    out = []
    for row in rows:
        cell = CellResult(*row[:21])  # type: ignore[call-arg]
        raw = cell.knobs
        if isinstance(raw, str):
            parsed = knobs.get(raw)
            if parsed is None:
                parsed = knobs[raw] = json.loads(raw)
            cell.knobs = parsed
        if cell.verdict in LEGACY_VERDICTS:
            cell.verdict = LEGACY_VERDICTS[cell.verdict]
        if cell.timings is not None:
            cell.timings = _json(cell.timings)
        out.append(cell)
    return out


def unmeasured_items(source: Readable, run_ids: Iterable[int]) -> dict[int, list[str]]:
    """Per run, what its newest grade says it could not measure (the evidence's
    ``coverage.unmeasured``); runs whose grade lists nothing are absent. Extracted by the
    database: only that list leaves it, not the whole evidence."""
    out: dict[int, list[str]] = {}
    with source.reader() as rc:
        if rc.dialect == "postgresql":
            extract = "g.evidence -> 'coverage' -> 'unmeasured'"
        else:
            extract = "json_extract(g.evidence, '$.coverage.unmeasured')"
        for chunk in chunks(run_ids):
            sql = (f"SELECT g.run_id, {extract} FROM grades AS g WHERE g.run_id IN {_in_list(len(chunk))} "
                   f"AND g.id = ({newest_grade_sql('g.run_id')})")
            for run_id, items in rc.rows(sql, chunk):
                items = _json(items) if items is not None else None
                if items:
                    out[run_id] = [str(item) for item in items]
    return out


# --- run_samples: per-run counters and per-request timings (db/samples.py) ------------


def counter_values(source: Readable, run_ids: Iterable[int], names: Sequence[str]) -> dict[int, tuple[float | None, ...]]:
    """Per run, the totals of the named counters (None where a run has not got one), from its
    ``run_samples`` row, extracted by the database: the JSON is not parsed in Python, and
    the per-phase ``metrics`` rows are not grouped (half the time on 10,000 runs)."""
    out: dict[int, tuple[float | None, ...]] = {}
    with source.reader() as rc:
        if rc.dialect == "postgresql":
            extract = "CAST((counters ->> CAST(? AS TEXT)) AS FLOAT)"
            keys: tuple[str, ...] = tuple(names)
        else:
            extract = "CAST(json_extract(counters, ?) AS REAL)"
            keys = tuple(f'$."{name}"' for name in names)
        columns = ", ".join([extract] * len(keys))
        for chunk in chunks(run_ids):
            sql = f"SELECT run_id, {columns} FROM run_samples WHERE run_id IN {_in_list(len(chunk))}"
            for run_id, *values in rc.rows(sql, (*keys, *chunk)):
                out[run_id] = tuple(values)
    return out


def prefix_hit_rates(source: Readable, run_ids: Iterable[int]) -> dict[int, float]:
    """Per run, prefix cache hits / queries over its phases."""
    return {run_id: (hit or 0.0) / query
            for run_id, (hit, query) in counter_values(source, run_ids, (PREFIX_HITS, PREFIX_QUERIES)).items() if query}


def speed_notes(source: Readable, run_ids: Iterable[int]) -> dict[int, str]:
    """Per run whose drafts were barely accepted, the speed finding shown beside its verdict
    (vmatrix/speed.py); runs without one are absent."""
    from vmatrix import speed

    names = (speed.DRAFT_TOKENS, speed.ACCEPTED_TOKENS)
    out = {}
    for run_id, values in counter_values(source, run_ids, names).items():
        note = speed.low_acceptance({n: v for n, v in zip(names, values) if v is not None})
        if note is not None:
            out[run_id] = note
    return out


def counter_texts(source: Readable, run_ids: Iterable[int]) -> dict[int, Any]:
    """Per run, its ``run_samples.counters`` as the driver returns it (JSON text from
    sqlite3, a dict from psycopg), undecoded: runs often share the same text, and callers
    decode each distinct one once. Runs without a summary row are absent."""
    out: dict[int, Any] = {}
    with source.reader() as rc:
        for chunk in chunks(run_ids):
            sql = f"SELECT run_id, counters FROM run_samples WHERE run_id IN {_in_list(len(chunk))}"
            out.update(rc.rows(sql, chunk))
    return out


def metric_totals_for(source: Readable, run_ids: Iterable[int]) -> dict[int, dict[str, float]]:
    """Per run, each counter summed over the run's phases, as recorded in its
    ``run_samples`` row (one narrow row per run, not one row per counter and phase)."""
    out: dict[int, dict[str, float]] = {}
    for run_id, raw in counter_texts(source, run_ids).items():
        counters = _json(raw)
        if counters:
            out[run_id] = counters
    return out


def sample_rows(source: Readable, run_ids: Iterable[int]) -> dict[int, tuple[str, str, bytes, bytes]]:
    """Per run with requests, its ``run_samples`` keys, phases, TTFT and decode columns as
    stored (``db/samples.py`` decodes them)."""
    out: dict[int, tuple[str, str, bytes, bytes]] = {}
    with source.reader() as rc:
        for chunk in chunks(run_ids):
            sql = (f"SELECT run_id, keys, phases, ttft_s, decode_tps FROM run_samples "
                   f"WHERE run_id IN {_in_list(len(chunk))} AND requests > 0")
            for run_id, keys, phases, ttft, decode in rc.rows(sql, chunk):
                if not isinstance(ttft, bytes):  # psycopg may hand BLOBs over as memoryview
                    ttft, decode = bytes(ttft), bytes(decode)
                out[run_id] = (keys, phases, ttft, decode)
    return out


def comparison_rows(source: Readable, run_ids: Iterable[int]) -> dict[int, tuple[int, str, bytes, bytes, Any]]:
    """Per run with a ``run_samples`` row, what a comparison reads of it in one pass over
    the rows (not one for the samples and one for the counters): its request count, its
    keys, TTFT and decode columns as stored (:func:`sample_rows` without the phases,
    which a comparison does not use) and its counters as :func:`counter_texts` gives them."""
    out: dict[int, tuple[int, str, bytes, bytes, Any]] = {}
    with source.reader() as rc:
        for chunk in chunks(run_ids):
            sql = (f"SELECT run_id, requests, keys, ttft_s, decode_tps, counters FROM run_samples "
                   f"WHERE run_id IN {_in_list(len(chunk))}")
            for run_id, requests, keys, ttft, decode, counters in rc.rows(sql, chunk):
                if not isinstance(ttft, bytes):  # psycopg may hand BLOBs over as memoryview
                    ttft, decode = bytes(ttft), bytes(decode)
                out[run_id] = (requests, keys, ttft, decode, counters)
    return out


@dataclass(frozen=True)
class RecallCount:
    """How many of a run's answered requests with an expected answer it got right."""

    right: int
    requests: int

    @property
    def accuracy(self) -> float:
        return self.right / self.requests


def recall_counts(source: Readable, run_ids: Iterable[int]) -> dict[int, RecallCount]:
    """Per run, its answers graded against the workload's expectations (vmatrix/expect.py),
    as jobs.grade.recall grades them: a request that failed is left out, an answer the
    model did not finish within max_tokens is wrong. Runs without an expectation (a
    trace without ground truth, runs recorded before 0008) are absent."""
    from vmatrix.expect import Expectation

    tally: dict[int, list[int]] = {}
    with source.reader() as rc:
        for chunk in chunks(run_ids):
            # Only the answer's characters leave the database: the text past the end token can be long.
            sql = (f"SELECT run_id, expect, substr(text, 1, answer_chars) FROM requests "
                   f"WHERE run_id IN {_in_list(len(chunk))} AND expect IS NOT NULL AND error IS NULL")
            for run_id, raw, answer in rc.rows(sql, chunk):
                expect = Expectation.from_json(json.loads(raw) if isinstance(raw, str) else raw)
                counts = tally.setdefault(run_id, [0, 0])
                counts[0] += expect.matches(answer)
                counts[1] += 1
    return {run_id: RecallCount(right, n) for run_id, (right, n) in tally.items()}
