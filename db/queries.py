"""Read-side queries for the CLI, returning plain dataclasses so no ORM object (or open
session) escapes the store.

Verdicts always come from a run's newest grade; an ungraded run shows its status.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, and_, or_, select

from vmatrix.cells import LEGACY_VERDICTS
from vmatrix.db.models import CellRow, GradeRow, RequestRow, Run, Sweep, latest_first, newest_grade_id

# The reads `results table` and `results compare` share, and the lookup table itself, live
# in modules that do not import SQLAlchemy (db/reads.py, db/table.py); re-exported here,
# where the rest of the read side has always been imported from.
from vmatrix.db.reads import (  # noqa: F401
    GRADE_RECENCY,
    PREFIX_HITS,
    PREFIX_QUERIES,
    CellResult,
    cell_results,
    metric_totals_for,
)
from vmatrix.db.reads import chunks as _chunks
from vmatrix.db.samples import quantile
from vmatrix.db.store import Store
from vmatrix.db.table import RENDER_WIDTH, SIGNATURE_WIDTH, Table, knob_text, lookup_table, render_table  # noqa: F401
from vmatrix.errors import NotFoundError


@dataclass(frozen=True)
class RunSummary:
    run_id: int
    cell_id: str
    engine: str
    knobs: dict[str, Any]
    status: str
    verdict: str | None  # None until the run is graded
    signature: str | None
    started_at: float
    finished_at: float
    total_s: float


@dataclass(frozen=True)
class GradeDetail:
    grade_id: int
    verdict: str
    summary: str
    evidence: dict[str, Any]
    control_run_id: int | None
    created_at: float


@dataclass(frozen=True)
class RunDetail:
    summary: RunSummary
    message: str | None
    log_path: str | None
    node: str | None
    gpu_ids: list[str]
    fingerprint: dict[str, Any]
    timings: dict[str, float]
    grades: list[GradeDetail]  # newest first; the first one is the verdict
    attempts: list[dict[str, Any]] = field(default_factory=list)  # two or more: Ray retried the cell
    # Client-side latencies over the run's answered requests (``latency_summary``).
    latency: dict[str, float | int | None] = field(default_factory=dict)
    layout: dict[str, Any] | None = None  # runs.layout: the block its shaped requests were laid out on


@dataclass(frozen=True)
class CellDetail:
    cell_id: str
    engine: str
    model: str
    knobs: dict[str, Any]
    control_id: str | None
    spec: dict[str, Any]
    runs: list[RunDetail]  # newest first


def _with_verdicts(stmt: Select[Any]) -> Select[Any]:
    """Add the newest grade's verdict (or NULL) as a column to a select over Run."""
    return stmt.add_columns(GradeRow.verdict).outerjoin(GradeRow, GradeRow.id == newest_grade_id())


def _summary(run: Run, cell: CellRow, verdict: str | None) -> RunSummary:
    return RunSummary(
        run_id=run.id,
        cell_id=run.cell_id,
        engine=cell.engine_label,
        knobs=cell.knobs,
        status=run.status,
        verdict=verdict,
        signature=run.signature,
        started_at=run.started_at,
        finished_at=run.finished_at,
        # Older runners may not time the whole run; the wall clock span is close enough.
        total_s=run.timings.get("total_s", run.finished_at - run.started_at),
    )


def list_runs(store: Store, sweep_id: int | None = None, limit: int = 50,
              results: Collection[str] | None = None) -> list[RunSummary]:
    """The newest runs, of one sweep or of all; with ``results``, only the runs whose
    newest verdict (their status, while ungraded) is one of them."""
    stmt = _with_verdicts(select(Run, CellRow).join(CellRow, CellRow.id == Run.cell_id))
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    if results is not None:
        # Stored grades may carry an old name (LEGACY_VERDICTS); they match under the new one.
        stored = {*results, *(old for old, new in LEGACY_VERDICTS.items() if new in results)}
        stmt = stmt.where(or_(GradeRow.verdict.in_(sorted(stored)),
                              and_(GradeRow.verdict.is_(None), Run.status.in_(sorted(results)))))
    stmt = stmt.order_by(*latest_first()).limit(limit)
    with store.session() as session:
        return [_summary(run, cell, verdict) for run, cell, verdict in session.execute(stmt)]


def latency_summary(rows: Iterable[tuple[float | None, list[float] | None, float | None]]) -> dict[str, float | int | None]:
    """Medians and 99th percentiles of TTFT, inter-token latency and end-to-end time,
    from ``(ttft_s, itl_s, e2e_s)`` per answered request. ITLs are pooled over requests
    and percentiles interpolated linearly, as vLLM's serving benchmark reports them;
    None where nothing was measured (runs recorded before ITLs were have no ``itl_s``)."""
    rows = list(rows)
    measured = {
        "ttft": sorted(t for t, _, _ in rows if t is not None),
        "itl": sorted(x for _, gaps, _ in rows for x in gaps or ()),
        "e2e": sorted(e for _, _, e in rows if e is not None),
    }
    out: dict[str, float | int | None] = {"requests": len(rows)}
    for name, values in measured.items():
        for q in (50, 99):
            out[f"{name}_p{q}_s"] = quantile(values, q / 100) if values else None
    return out


def resolve_cell_id(store: Store, cell_id_prefix: str) -> str:
    """The one cell id that starts with ``cell_id_prefix``; NotFoundError for none or several."""
    with store.session() as session:
        ids = session.scalars(
            select(CellRow.id).where(CellRow.id.startswith(cell_id_prefix, autoescape=True)).limit(2)
        ).all()
    if not ids:
        raise NotFoundError(f"no cell id starts with {cell_id_prefix!r}")
    if len(ids) > 1:
        raise NotFoundError(f"cell id prefix {cell_id_prefix!r} matches several cells; give more of it")
    return ids[0]


def show_cell(store: Store, cell_id_prefix: str) -> CellDetail:
    """One cell with every run of it and every grade of those runs."""
    cell_id = resolve_cell_id(store, cell_id_prefix)
    with store.session() as session:
        cell = session.get_one(CellRow, cell_id)
        runs = session.scalars(
            select(Run).where(Run.cell_id == cell.id).order_by(*latest_first())
        ).all()
        answered: dict[int, list[tuple[Any, Any, Any]]] = defaultdict(list)
        for run_id, *timing in session.execute(
            select(RequestRow.run_id, RequestRow.ttft_s, RequestRow.itl_s, RequestRow.e2e_s)
            .where(RequestRow.run_id.in_([r.id for r in runs]), RequestRow.error.is_(None))
        ):
            answered[run_id].append(tuple(timing))  # type: ignore[arg-type]
        grades: dict[int, list[GradeDetail]] = defaultdict(list)
        for g in session.scalars(
            select(GradeRow).where(GradeRow.run_id.in_([r.id for r in runs])).order_by(getattr(GradeRow, GRADE_RECENCY).desc())
        ):
            grades[g.run_id].append(
                GradeDetail(g.id, g.verdict, g.summary, g.evidence, g.control_run_id, g.created_at)
            )
    return CellDetail(
        cell_id=cell.id,
        engine=cell.engine_label,
        model=cell.model_name,
        knobs=cell.knobs,
        control_id=cell.control_id,
        spec=cell.spec,
        runs=[
            RunDetail(
                summary=_summary(run, cell, grades[run.id][0].verdict if grades[run.id] else None),
                message=run.message,
                log_path=run.log_path,
                node=run.node,
                gpu_ids=run.gpu_ids,
                fingerprint=run.fingerprint,
                timings=run.timings,
                grades=grades[run.id],
                attempts=run.attempts,
                latency=latency_summary(answered[run.id]) if run.id in answered else {},
                layout=run.layout,
            )
            for run in runs
        ],
    )


# --- whole-sweep reads: compare, export, diff and the HTML report -------------------


def latest_grades_for(store: Store, run_ids: Iterable[int]) -> dict[int, GradeDetail]:
    """Each run's newest grade, evidence included."""
    out: dict[int, GradeDetail] = {}
    with store.session() as session:
        for chunk in _chunks(run_ids):
            for g in session.scalars(
                select(GradeRow)
                .join(Run, Run.id == GradeRow.run_id)
                .where(Run.id.in_(chunk), GradeRow.id == newest_grade_id())
            ):
                out[g.run_id] = GradeDetail(g.id, g.verdict, g.summary, g.evidence, g.control_run_id, g.created_at)
    return out


@dataclass(frozen=True)
class SweepInfo:
    sweep_id: int
    name: str
    spec_path: str
    created_at: float
    finished_at: float | None
    spec_text: str = ""  # the matrix file as it was when the sweep ran


def sweep_info(store: Store, sweep_id: int) -> SweepInfo:
    with store.session() as session:
        sweep = session.get(Sweep, sweep_id)
        if sweep is None:
            raise NotFoundError(f"no sweep {sweep_id}")
        return SweepInfo(sweep.id, sweep.name, sweep.spec_path, sweep.created_at, sweep.finished_at, sweep.spec_text)


def sweep_runs(store: Store, sweep_id: int) -> list[tuple[int, str, str]]:
    """(run id, cell id, status) of every run recorded by one sweep, oldest first."""
    with store.session() as session:
        return [tuple(r) for r in session.execute(  # type: ignore[misc]
            select(Run.id, Run.cell_id, Run.status).where(Run.sweep_id == sweep_id).order_by(Run.id))]


@dataclass(frozen=True)
class VerdictChange:
    cell_id: str
    engine: str
    knobs: dict[str, Any]
    before: str  # result in the first sweep
    after: str
    before_run: int | None
    after_run: int | None


@dataclass(frozen=True)
class SweepDiff:
    sweep_a: int
    sweep_b: int
    changed: list[VerdictChange]
    unchanged: int
    only_a: list[CellResult]
    only_b: list[CellResult]


def diff_sweeps(store: Store, sweep_a: int, sweep_b: int) -> SweepDiff:
    """Cells of both sweeps whose result changed, and cells only one of them has.

    Cells match by id, i.e. by everything that can change an outcome; so a cell's result
    changes between sweeps only through a rerun (or a regrade), and each side is the result
    as of its sweep (:func:`cell_results` with ``as_of_sweep``).
    """
    for sweep in (sweep_a, sweep_b):
        sweep_info(store, sweep)  # a clear error for a sweep that does not exist
    a = {c.cell_id: c for c in cell_results(store, sweep_a, as_of_sweep=True)}
    b = {c.cell_id: c for c in cell_results(store, sweep_b, as_of_sweep=True)}
    both = [cid for cid in a if cid in b]
    changed = [
        VerdictChange(cid, a[cid].engine, a[cid].knobs, a[cid].result, b[cid].result, a[cid].run_id, b[cid].run_id)
        for cid in both
        if a[cid].result != b[cid].result
    ]
    return SweepDiff(
        sweep_a=sweep_a,
        sweep_b=sweep_b,
        changed=changed,
        unchanged=len(both) - len(changed),
        only_a=[c for cid, c in a.items() if cid not in b],
        only_b=[c for cid, c in b.items() if cid not in a],
    )


@dataclass(frozen=True)
class RepeatedCell:
    cell_id: str
    engine: str
    knobs: dict[str, Any]
    earlier_run_id: int
    later_run_id: int


def repeated_cells(store: Store, sweep_id: int | None = None) -> list[RepeatedCell]:
    """Cells with at least two successful runs (the latest two), e.g. a control run again.

    With ``sweep_id``, cells whose latest run belongs to that sweep.
    """
    with store.session() as session:
        runs = session.execute(
            select(Run.id, Run.cell_id, Run.sweep_id).where(Run.status == "ok")
            .order_by(Run.cell_id, Run.finished_at, Run.id)
        ).all()
        by_cell: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for run_id, cell_id, sweep in runs:
            by_cell[cell_id].append((run_id, sweep))
        out = []
        for cell_id, seq in by_cell.items():
            if len(seq) < 2 or (sweep_id is not None and seq[-1][1] != sweep_id):
                continue
            cell = session.get_one(CellRow, cell_id)
            out.append(RepeatedCell(cell_id, cell.engine_label, cell.knobs, seq[-2][0], seq[-1][0]))
    return sorted(out, key=lambda c: (c.engine, json.dumps(c.knobs, sort_keys=True)))


def recorded_releases(store: Store, accelerator: str, patches: str | None, lmcache: str | None) -> list[str]:
    """The vLLM versions of the cells recorded for one engine kind (same accelerator, patch
    set label and LMCache), as stored: releases, and bisect steps' commit builds
    (``0.30.0+g0123456789ab``) too."""
    stmt = select(CellRow.vllm_version).distinct().where(
        CellRow.accelerator == accelerator,
        CellRow.patches.is_(None) if patches is None else CellRow.patches == patches,
        CellRow.lmcache.is_(None) if lmcache is None else CellRow.lmcache == lmcache,
    )
    with store.session() as session:
        return list(session.scalars(stmt))
