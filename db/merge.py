"""Copying the results of one store into another: ``vmatrix results merge SRC ... --db DEST``.

Each GPU lease brings back a DB of its own; merged into one, its runs can be queried,
compared and reused (``vmatrix fixes``) beside the others'. Every table that holds a
recorded result is carried (:data:`TABLES`). Integer ids are DEST's own: a source's sweep,
run and grade get new ids, and every reference to one is rewritten to DEST's id, in
columns (``runs.sweep_id``, ``grades.control_run_id``, ``noise_floors.run_id`` and
``repeat_run_id``, ``fixes.sweep_id``, ``shrinks.run_id`` ...) and inside JSON (each
``run_id`` of ``fixes.rows`` and ``bisects.steps``). Cell ids are content hashes and are
kept; a cell DEST (or an earlier source) already holds must have the same stored spec,
or nothing at all is merged (:class:`~vmatrix.errors.MergeError` naming the cell).

Append-only and idempotent: no DEST row is changed or deleted, and a row already there is
not added again. "Already there" is decided by natural keys, not by a provenance table:

* a sweep: its name, spec path, spec text and ``created_at``;
* a run, inside its sweep: cell, status, ``started_at`` and ``finished_at`` (the rule
  ``publish`` uses to count a run found in two DBs once);
* a grade, of its run: ``created_at`` and the control run; a noise floor: its sweep,
  control cell, both runs and ``created_at``; a bisect, fixes or shrink row: what it is
  about (its cells, ends or run) and ``created_at``;
* a run's requests, metrics and samples are written with it, so they come with a new run.

Every such row was stamped with ``time.time()`` when it was recorded, so these keys do not
collide in practice, and when they do (a test that records two runs with the same times)
rows of one key are paired in id order: the k-th source row with the k-th DEST row. Why
no provenance table (source, source id): a source has no identity that survives copying
(its ids start at 1 like every other DB's; its file is renamed, unpacked, copied), and
DBs share history by copying (a lease that starts from a copy of DEST, or a DB merged
into two places): natural keys see the shared rows as the same rows wherever they came
from, with no migration. One cost: ``sweeps.finished_at``, the one column the store sets
after the fact, is not compared, so a sweep merged while it still ran keeps DEST's
(empty) finish time; its runs recorded later come with the next merge.

One transaction per source: a failure leaves DEST as it was. Rows a source gained while it
was read (a sweep still writing to it) whose parents were read before them are held back
(counted in :attr:`Merged.held`) rather than written with a reference DEST cannot resolve;
the next merge adds them. Column values are copied as stored: a legacy verdict name
stays as written, and SQL NULL stays distinct from JSON ``null``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Column, Connection, String, Table, Text, bindparam, cast, insert, select, type_coerce
from sqlalchemy.sql.elements import ColumnElement

from vmatrix.db.models import Base, VerdictName
from vmatrix.db.store import Store
from vmatrix.errors import MergeError

TABLES = ("sweeps", "cells", "sweep_cells", "runs", "requests", "metrics", "run_samples", "grades", "noise_floors",
          "bisects", "fixes", "shrinks")
# Tables whose integer id DEST hands out anew (cells keep their hash, the rest have no id).
NEW_IDS = frozenset(TABLES) - {"cells", "sweep_cells", "run_samples"}
# What the one-line summary counts; requests, metrics and samples come with their runs.
COUNTED = ("sweeps", "cells", "runs", "grades", "noise_floors", "bisects", "fixes", "shrinks")
CHUNK = 500  # values in one IN list (SQLite allows 32,766 bound values; PostgreSQL 65,535)


@dataclass
class Merged:
    """What merging one source did: rows added, rows DEST had already, rows held back, by table."""

    source: str
    added: Counter[str] = field(default_factory=Counter)
    present: Counter[str] = field(default_factory=Counter)
    held: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        """``a.db: added 3 sweeps, 96 runs, 102 grades; already there: 6 cells``."""
        def counts(c: Counter[str]) -> str:
            return ", ".join(f"{c[t]} {t.replace('_', ' ')}" for t in (*COUNTED, "sweep_cells") if c[t])
        parts = [f"added {counts(self.added)}" if any(self.added.values()) else "nothing new"]
        if any(self.present[t] for t in COUNTED):
            parts.append(f"already there: {counts(self.present)}")
        if any(self.held.values()):
            parts.append(f"held back (recorded while it was read; merge again): {counts(self.held)}")
        return f"{self.source}: " + "; ".join(parts)


class _Unmapped(Exception):
    """A row refers to a source row this merge did not place: the row is held back."""


def merge_stores(dest: Store, sources: Sequence[tuple[str, Store]]) -> list[Merged]:
    """Merge each ``(label, store)`` into ``dest``, in order, one transaction each.

    Every source's cells are checked against DEST's and the earlier sources' before anything
    is written: a cell id stored with two different specs is a :class:`MergeError` naming
    the cell and the source, and DEST is left as it was."""
    check_cells(dest, sources)
    return [merge_store(dest, source, label) for label, source in sources]


def check_cells(dest: Store, sources: Sequence[tuple[str, Store]]) -> None:
    """Refuse (:class:`MergeError`) a cell id whose stored spec differs between DEST and a
    source, or between two sources."""
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for label, source in sources:
        with source.engine.connect() as src:
            specs = _specs(src, None)
        with dest.engine.connect() as dst:
            for cell_id, spec in _specs(dst, sorted(specs)).items():
                if spec != specs[cell_id]:
                    raise _conflict(label, cell_id, None)
        for cell_id, spec in specs.items():
            earlier = seen.setdefault(cell_id, (label, spec))
            if earlier[1] != spec:
                raise _conflict(label, cell_id, earlier[0])


def merge_store(dest: Store, source: Store, label: str) -> Merged:
    """Copy what ``source`` holds and ``dest`` lacks into ``dest``, in one transaction."""
    merged = Merged(label)
    with source.engine.connect() as src, dest.engine.begin() as dst:
        _Merge(src, dst, merged).run()
    return merged


def _specs(conn: Connection, ids: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """Stored cell specs, by id: every cell's (``ids`` None) or those of ``ids`` the DB has."""
    cells = _table("cells")
    stmt = select(cells.c.id, cells.c.spec)
    if ids is None:
        return dict(conn.execute(stmt).all())
    found: dict[str, dict[str, Any]] = {}
    for chunk in _chunks(ids):
        found.update(conn.execute(stmt.where(cells.c.id.in_(chunk))).all())
    return found


def _conflict(label: str, cell_id: str, other: str | None) -> MergeError:
    """Names the source as the input ``src`` and DEST as ``db`` (the CLI: SRC and --db)."""
    if other is None:
        return MergeError.naming("{src} {label}: cell {cell_id} is stored in {db} with another spec; nothing merged",
                                 label=label, cell_id=cell_id)
    return MergeError.naming("{src} {label}: cell {cell_id} is stored with another spec in {src} {other}; "
                             "nothing merged", label=label, cell_id=cell_id, other=other)


def _table(name: str) -> Table:
    return Base.metadata.tables[name]


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), CHUNK):
        yield values[i:i + CHUNK]


def _is_json(c: Column[Any]) -> bool:
    return isinstance(c.type, JSON)


def _as_stored(table: Table) -> list[ColumnElement[Any]]:
    """The columns as stored: JSON as its text (copied without parsing it, SQL NULL apart from
    JSON ``null``), a verdict under the name it was written with."""
    def stored(c: Column[Any]) -> ColumnElement[Any]:
        if _is_json(c):
            return cast(c, Text).label(c.name)
        return type_coerce(c, String).label(c.name) if isinstance(c.type, VerdictName) else c
    return [stored(c) for c in table.columns]


def _inserting(table: Table, dialect: str) -> Any:
    """An INSERT of rows read by :func:`_as_stored`: JSON text bound as text (PostgreSQL casts
    it to json; SQLite keeps JSON as text), so it is written as it was read. Its parameters
    name a JSON column ``<name>_json`` (a column's own name is the INSERT's to bind)."""
    def text_of(c: Column[Any]) -> ColumnElement[Any]:
        bound = bindparam(c.name + "_json", type_=Text)
        return cast(bound, JSON) if dialect == "postgresql" else bound
    return insert(table).values({c.name: text_of(c) for c in table.columns if _is_json(c)})


class _Merge:
    """One source into DEST, inside DEST's transaction ``dst``."""

    def __init__(self, src: Connection, dst: Connection, merged: Merged) -> None:
        self.src, self.dst, self.merged = src, dst, merged
        self.cells: set[str] = set()
        self.sweeps: dict[int, int] = {}  # source id -> DEST id
        self.runs: dict[int, int] = {}
        self.new_sweeps: set[int] = set()  # DEST ids made by this merge
        self.new_runs: dict[int, int] = {}  # source id -> DEST id of the runs added

    def read(self, name: str, *where: Any) -> list[dict[str, Any]]:
        """The source's rows of a table as stored, in id order."""
        table = _table(name)
        stmt = select(*_as_stored(table)).where(*where).order_by(*table.primary_key.columns)
        return [dict(r._mapping) for r in self.src.execute(stmt)]

    def write(self, name: str, rows: list[dict[str, Any]]) -> int | None:
        """Insert rows read by :meth:`read` (the id column dropped where DEST hands one out); one
        row returns its new id."""
        if not rows:
            return None
        table = _table(name)
        json_columns = {c.name for c in table.columns if _is_json(c)}
        params = [{(k + "_json" if k in json_columns else k): v for k, v in r.items()
                   if k != "id" or name not in NEW_IDS} for r in rows]
        stmt = _inserting(table, self.dst.dialect.name)
        if len(params) > 1:
            self.dst.execute(stmt, params)
            return None
        done = self.dst.execute(stmt, params[0])
        return done.inserted_primary_key[0] if name in NEW_IDS else None

    def run(self) -> None:
        self.merge_cells()
        self.merge_sweeps()
        self.merge_sweep_cells()
        self.merge_runs()
        self.copy_transcripts()
        self.place("grades", ("run_id", "control_run_id", "created_at"), "run_id",
                   lambda r: {"run_id": self.run_id(r["run_id"]), "control_run_id": self.run_id(r["control_run_id"])})
        self.place("noise_floors", ("sweep_id", "control_cell_id", "run_id", "repeat_run_id", "created_at"), "sweep_id",
                   lambda r: {"sweep_id": self.sweep_id(r["sweep_id"]), "control_cell_id": self.cell(r["control_cell_id"]),
                              "run_id": self.run_id(r["run_id"]), "repeat_run_id": self.run_id(r["repeat_run_id"])})
        self.place("bisects", ("mode", "good", "bad", "old_cell_id", "new_cell_id", "created_at"), "created_at",
                   lambda r: {"old_cell_id": self.cell(r["old_cell_id"]), "new_cell_id": self.cell(r["new_cell_id"]),
                              "steps": self.json_runs(r["steps"])})
        self.place("fixes", ("cell_id", "answer", "created_at"), "created_at",
                   lambda r: {"cell_id": self.cell(r["cell_id"]), "control_id": self.cell(r["control_id"]),
                              "sweep_id": self.sweep_id(r["sweep_id"]), "rows": self.json_runs(r["rows"])})
        self.place("shrinks", ("cell_id", "run_id", "created_at"), "created_at",
                   lambda r: {"cell_id": self.cell(r["cell_id"]), "run_id": self.run_id(r["run_id"])})

    # References: the DEST id of a source row, or _Unmapped (None stays None).
    def run_id(self, source_id: int | None) -> int | None:
        return None if source_id is None else self._mapped(self.runs, source_id)

    def sweep_id(self, source_id: int | None) -> int | None:
        return None if source_id is None else self._mapped(self.sweeps, source_id)

    def cell(self, cell_id: str | None) -> str | None:
        if cell_id is not None and cell_id not in self.cells:
            raise _Unmapped
        return cell_id

    @staticmethod
    def _mapped(ids: dict[int, int], source_id: int) -> int:
        if source_id not in ids:
            raise _Unmapped
        return ids[source_id]

    def json_runs(self, stored: str | None) -> str | None:
        """A JSON list of objects (``fixes.rows``, ``bisects.steps``), as stored text, with each
        ``run_id`` DEST's; written as the store writes JSON (``json.dumps``)."""
        items = json.loads(stored) if stored is not None else None
        if not isinstance(items, list):
            return stored
        return json.dumps([{**item, "run_id": self.run_id(item["run_id"])}
                           if isinstance(item, dict) and "run_id" in item else item for item in items])

    def merge_cells(self) -> None:
        rows = self.read("cells")
        have = _specs(self.dst, [r["id"] for r in rows])
        for r in rows:  # checked before writing anything; checked again inside the transaction
            if r["id"] in have and have[r["id"]] != json.loads(r["spec"]):
                raise _conflict(self.merged.source, r["id"], None)
        new = [r for r in rows if r["id"] not in have]
        self.write("cells", new)
        self.cells = {r["id"] for r in rows}
        self.merged.added["cells"] += len(new)
        self.merged.present["cells"] += len(rows) - len(new)

    def merge_sweeps(self) -> None:
        rows = self.read("sweeps")
        placed = self.place("sweeps", ("name", "spec_path", "spec_text", "created_at"), "created_at", lambda r: {},
                            rows=rows, want_ids=True)
        for r, (dest_id, new) in zip(rows, placed, strict=True):
            self.sweeps[r["id"]] = dest_id
            if new:
                self.new_sweeps.add(dest_id)

    def merge_sweep_cells(self) -> None:
        table = _table("sweep_cells")
        have: set[tuple[int, str]] = set()
        for chunk in _chunks(sorted(set(self.sweeps.values()) - self.new_sweeps)):
            have.update(self.dst.execute(select(table.c.sweep_id, table.c.cell_id)
                                         .where(table.c.sweep_id.in_(chunk))).all())
        new = []
        for r in self.read("sweep_cells"):
            if r["sweep_id"] not in self.sweeps or r["cell_id"] not in self.cells:
                self.merged.held["sweep_cells"] += 1
            elif (self.sweeps[r["sweep_id"]], r["cell_id"]) not in have:
                new.append({**r, "sweep_id": self.sweeps[r["sweep_id"]]})
                if new[-1]["sweep_id"] not in self.new_sweeps:  # a cell added to a sweep DEST had: said
                    self.merged.added["sweep_cells"] += 1
        self.write("sweep_cells", new)

    def merge_runs(self) -> None:
        rows = self.read("runs")
        placed = self.place("runs", ("sweep_id", "cell_id", "status", "started_at", "finished_at"), "sweep_id",
                            lambda r: {"sweep_id": self.sweep_id(r["sweep_id"]), "cell_id": self.cell(r["cell_id"])},
                            rows=rows, want_ids=True)
        for r, (dest_id, new) in zip(rows, placed, strict=True):
            if dest_id is not None:
                self.runs[r["id"]] = dest_id
                if new:
                    self.new_runs[r["id"]] = dest_id

    def copy_transcripts(self) -> None:
        """A new run's requests, metrics and samples, as the store wrote them with it."""
        for name in ("requests", "metrics", "run_samples"):
            column = _table(name).c.run_id
            for chunk in _chunks(sorted(self.new_runs)):
                rows = self.read(name, column.in_(chunk))
                self.write(name, [{**r, "run_id": self.new_runs[r["run_id"]]} for r in rows])

    def place(self, name: str, key: tuple[str, ...], probe: str, remap: Callable[[dict[str, Any]], dict[str, Any]],
              rows: list[dict[str, Any]] | None = None, want_ids: bool = False) -> list[tuple[int | None, bool]]:
        """Each source row (all of the table's unless ``rows``; its references made DEST's by
        ``remap``) matched to a DEST row of the same ``key``, or inserted: (DEST id, added) per
        row; (None, False) for a row held back. Rows of one key pair up in id order. DEST's
        candidates are read by ``probe``, one of the key's columns, in chunks."""
        table = _table(name)
        ready: list[dict[str, Any] | None] = []
        for r in self.read(name) if rows is None else rows:
            try:
                ready.append({**r, **remap(r)})
            except _Unmapped:
                ready.append(None)
                self.merged.held[name] += 1
        have: dict[tuple[Any, ...], deque[int]] = defaultdict(deque)
        for chunk in _chunks(sorted({v[probe] for v in ready if v is not None and v[probe] is not None})):
            found = self.dst.execute(select(table.c.id, *(table.c[k] for k in key))
                                     .where(table.c[probe].in_(chunk)).order_by(table.c.id))
            for dest_id, *values in found:
                have[tuple(values)].append(dest_id)
        out: list[tuple[int | None, bool]] = []
        batch = []
        for values in ready:
            same = have.get(tuple(values[k] for k in key)) if values is not None else None
            if values is None:
                out.append((None, False))
            elif same:
                out.append((same.popleft(), False))
                self.merged.present[name] += 1
            else:
                self.merged.added[name] += 1
                if want_ids:
                    out.append((self.write(name, [values]), True))
                else:
                    batch.append(values)
                    out.append((None, True))
        self.write(name, batch)  # in source order: a run's newest grade is its highest id
        return out
