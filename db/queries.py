"""Read-side queries for the CLI, returning plain dataclasses so no ORM object (or open
session) escapes the store.

Verdicts always come from a run's newest grade; an ungraded run shows its status.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from sqlalchemy import ScalarSelect, Select, String, func, literal, null, select, type_coerce
from sqlalchemy import Text as SqlText
from sqlalchemy.orm import aliased

from db.models import CellRow, GradeRow, Run, RunSampleRow, Sweep, SweepCell
from db.store import Store

PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
SIGNATURE_WIDTH = 80
RENDER_WIDTH = 10_000  # text tables wider than this wrap their cells


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


@dataclass(frozen=True)
class CellDetail:
    cell_id: str
    engine: str
    model: str
    knobs: dict[str, Any]
    control_id: str | None
    spec: dict[str, Any]
    runs: list[RunDetail]  # newest first


@dataclass
class Table:
    """A two-way lookup: one table cell per combination of row and column values."""

    row_keys: list[str]
    col_keys: list[str]
    rows: list[str]  # row header values
    cols: list[str]
    cells: dict[tuple[str, str], str]  # (row, col) -> text; combinations no cell has are absent


def _latest_grade_id() -> ScalarSelect[Any]:
    """Correlated on ``Run``: that run's newest grade id (highest id wins, as in the store),
    one probe of ``ix_grades_run_id``.

    Not a join to a ``GROUP BY run_id`` subquery: SQLite plans that join well only when it
    guesses the outer side is small, and on 10,000 runs a wrong guess (a bound parameter
    elsewhere in the query is enough) scans the grouped subquery once per run: seconds.
    """
    inner = aliased(GradeRow)
    return select(func.max(inner.id)).where(inner.run_id == Run.id).correlate(Run).scalar_subquery()


def _with_verdicts(stmt: Select[Any]) -> Select[Any]:
    """Add the newest grade's verdict (or NULL) as a column to a select over Run."""
    return stmt.add_columns(GradeRow.verdict).outerjoin(GradeRow, GradeRow.id == _latest_grade_id())


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


def list_runs(store: Store, sweep_id: int | None = None, limit: int = 50) -> list[RunSummary]:
    """The newest runs, of one sweep or of all."""
    stmt = _with_verdicts(select(Run, CellRow).join(CellRow, CellRow.id == Run.cell_id))
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    stmt = stmt.order_by(Run.finished_at.desc(), Run.id.desc()).limit(limit)
    with store.session() as session:
        return [_summary(run, cell, verdict) for run, cell, verdict in session.execute(stmt)]


def show_cell(store: Store, cell_id_prefix: str) -> CellDetail:
    """One cell with every run of it and every grade of those runs."""
    with store.session() as session:
        ids = session.scalars(
            select(CellRow.id).where(CellRow.id.startswith(cell_id_prefix, autoescape=True)).limit(2)
        ).all()
        if not ids:
            raise LookupError(f"no cell id starts with {cell_id_prefix!r}")
        if len(ids) > 1:
            raise LookupError(f"cell id prefix {cell_id_prefix!r} matches several cells; give more of it")
        cell = session.get_one(CellRow, ids[0])
        runs = session.scalars(
            select(Run).where(Run.cell_id == cell.id).order_by(Run.finished_at.desc(), Run.id.desc())
        ).all()
        grades: dict[int, list[GradeDetail]] = defaultdict(list)
        for g in session.scalars(
            select(GradeRow).where(GradeRow.run_id.in_([r.id for r in runs])).order_by(GradeRow.id.desc())
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
            )
            for run in runs
        ],
    )


def knob_text(value: Any) -> str:
    """A knob value as a short table label."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "off":
        return "off"
    if isinstance(value, dict) and "method" in value:
        text = str(value["method"])
        if "num_speculative_tokens" in value:
            text += f" k={value['num_speculative_tokens']}"
        return text
    if isinstance(value, list):
        return " ".join(knob_text(v) for v in value)
    return str(value)


def _axis_value(cell: CellResult, name: str) -> str:
    if name == "engine":
        return cell.engine
    if name == "model":
        return cell.model_name
    # A knob a cell does not set is at its engine default, which for these toggles is off.
    return knob_text(cell.knobs.get(name))


def _header(cell: CellResult, names: list[str]) -> str:
    return ", ".join(_axis_value(cell, n) for n in names)


def _truncate(text: str, width: int = SIGNATURE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _prefix_hit_rates(store: Store, run_ids: Iterable[int]) -> dict[int, float]:
    """Per run, prefix cache hits / queries over its phases, from the two counters in its
    ``run_samples`` row, extracted by the database: the JSON is not parsed in Python, and
    the per-phase ``metrics`` rows are not grouped (half the time on 10,000 runs)."""
    t = RunSampleRow
    hits, queries = t.counters[PREFIX_HITS].as_float(), t.counters[PREFIX_QUERIES].as_float()
    out: dict[int, float] = {}
    with store.engine.connect() as conn:
        for chunk in _chunks(run_ids):
            for run_id, hit, query in conn.execute(select(t.run_id, hits, queries).where(t.run_id.in_(chunk))):
                if query:
                    out[run_id] = (hit or 0.0) / query
    return out


def _cell_text(cell: CellResult, hit_rate: float | None) -> str:
    if cell.run_id is None:
        return "not run"
    label = cell.verdict or cell.status or "not run"
    if cell.status != "ok":
        detail = _truncate(cell.signature) if cell.signature else None
    else:
        detail = f"prefix hit {hit_rate:.0%}" if hit_rate is not None else None
    return f"{label} ({detail})" if detail else label


def lookup_table(store: Store, rows: list[str], cols: list[str], sweep_id: int | None = None) -> Table:
    """Latest result of every cell (of one sweep, or of all), laid out by the named axes.

    Each axis name is ``engine``, ``model`` or a knob name. A cell's latest run counts even
    when an earlier or later sweep recorded it: cells are content-addressed, so it is the
    same experiment.
    """
    cells = cell_results(store, sweep_id, with_timings=False)
    hit_rates = _prefix_hit_rates(store, (c.run_id for c in cells if c.run_id is not None))

    placed = [(_header(cell, rows), _header(cell, cols), cell) for cell in cells]
    texts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row, col, cell in placed:
        run_id = cell.run_id
        texts[row, col].append(_cell_text(cell, hit_rates.get(run_id) if run_id is not None else None))
    # Headers in first-seen order, which follows the order the cells were added.
    return Table(
        row_keys=list(rows),
        col_keys=list(cols),
        rows=list(dict.fromkeys(row for row, _, _ in placed)),
        cols=list(dict.fromkeys(col for _, col, _ in placed)),
        cells={key: " / ".join(parts) for key, parts in texts.items()},
    )


def _corner(table: Table) -> str:
    return f"{', '.join(table.row_keys)} \\ {', '.join(table.col_keys)}"


def _render_text(table: Table) -> str:
    headers = [_corner(table), *table.cols]
    body = [[row, *(table.cells.get((row, c), "-") for c in table.cols)] for row in table.rows]
    # As wide as the table wants (up to RENDER_WIDTH), so nothing is wrapped or cut off in
    # the returned string: each column as wide as its widest line plus padding, one rule
    # per column and edge. Worked out here rather than by Console.measure, which on a
    # table over 10,000 cells (cells of ~20,000 characters) took ~0.15 s.
    widths = [max(cell_len(line) for text in column for line in text.split("\n")) for column in zip(headers, *body)]
    natural = sum(widths) + 3 * len(widths) + 1
    width = min(natural, RENDER_WIDTH)
    grid = RichTable()
    for header in headers:
        grid.add_column(Text(header), no_wrap=natural <= RENDER_WIDTH)  # nothing to wrap: skip line breaking
    for values in body:
        # Text, not str: signatures often contain "[...]" that rich would read as markup.
        grid.add_row(*map(Text, values))
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(grid)
    return buffer.getvalue()


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _render_markdown(table: Table) -> str:
    header = [_corner(table), *table.cols]
    lines = [
        "| " + " | ".join(_md_escape(h) for h in header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in table.rows:
        values = [row, *(table.cells.get((row, c), "-") for c in table.cols)]
        lines.append("| " + " | ".join(_md_escape(v) for v in values) + " |")
    return "\n".join(lines) + "\n"


def _render_json(table: Table) -> str:
    row_name = ", ".join(table.row_keys)
    objects = [{row_name: row, **{c: table.cells.get((row, c)) for c in table.cols}} for row in table.rows]
    return json.dumps(objects, indent=2, ensure_ascii=False)


def render_table(table: Table, fmt: Literal["text", "json", "markdown"] = "text") -> str:
    renderers = {"text": _render_text, "json": _render_json, "markdown": _render_markdown}
    if fmt not in renderers:
        raise ValueError(f"unknown table format {fmt!r}; expected one of {', '.join(renderers)}")
    return renderers[fmt](table)


# --- whole-sweep reads: compare, export, diff and the HTML report -------------------


@dataclass(frozen=True)
class CellResult:
    """A cell with its latest run's outcome, flat, for reads over many cells at once."""

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


def _latest_run_id(up_to_sweep: int | None) -> ScalarSelect[Any]:
    """Correlated on ``CellRow``: the id of that cell's latest run, or NULL.

    One probe of ``ix_runs_cell_id_finished_at`` per cell, whose order it reads backwards.
    With ``up_to_sweep`` only runs recorded by that sweep or an earlier one count, and the
    sweep's own run wins: the result that sweep showed, even if a later one reran the cell.
    """
    inner = aliased(Run)
    stmt = select(inner.id).where(inner.cell_id == CellRow.id)
    if up_to_sweep is not None:
        stmt = stmt.where(inner.sweep_id <= up_to_sweep).order_by(inner.sweep_id.desc())
    stmt = stmt.order_by(inner.finished_at.desc(), inner.id.desc()).limit(1)
    return stmt.correlate(CellRow).scalar_subquery()


def cell_results(store: Store, sweep_id: int | None = None, as_of_sweep: bool = False,
                 with_timings: bool = True) -> list[CellResult]:
    """Every cell (of one sweep, or all) with its latest run and that run's newest grade.

    By default a cell's latest run counts whichever sweep recorded it, as in
    :func:`lookup_table`. ``as_of_sweep`` instead takes what ``sweep_id`` itself saw (see
    :func:`_latest_run_id`), which is what comparing two sweeps needs. Without
    ``with_timings`` every ``timings`` is None: decoding them is a good part of the time
    on 10,000 cells, and only the report shows them.
    """
    if as_of_sweep and sweep_id is None:
        raise ValueError("as_of_sweep needs a sweep_id")
    role = SweepCell.role if sweep_id is not None else literal(None, String)
    stmt = (
        select(
            CellRow.id.label("cell_id"), role.label("role"), CellRow.engine_label.label("engine"),
            CellRow.vllm_version, CellRow.accelerator, CellRow.patches, CellRow.lmcache, CellRow.model_name,
            CellRow.model_digest, CellRow.workload_digest, type_coerce(CellRow.knobs, SqlText).label("knobs"),
            CellRow.control_id, Run.id.label("run_id"), Run.sweep_id.label("run_sweep_id"), Run.status,
            GradeRow.verdict, GradeRow.summary.label("grade_summary"), Run.signature, Run.message, Run.log_path,
            (Run.timings if with_timings else null()).label("timings"),
        )
        .select_from(CellRow)
        .outerjoin(Run, Run.id == _latest_run_id(sweep_id if as_of_sweep else None))
        .outerjoin(GradeRow, GradeRow.id == _latest_grade_id())
        .order_by(CellRow.created_at, CellRow.id)
    )
    if sweep_id is not None:
        stmt = stmt.join(SweepCell, (SweepCell.cell_id == CellRow.id) & (SweepCell.sweep_id == sweep_id))
    # Knob sets repeat across engines: each distinct text is parsed once. (Drivers that
    # decode JSON themselves, as psycopg does, hand over the dict instead.)
    knobs: dict[str, dict[str, Any]] = {}

    def parsed(raw: Any) -> dict[str, Any]:
        if not isinstance(raw, str):
            return raw
        found = knobs.get(raw)
        if found is None:
            found = knobs[raw] = json.loads(raw)
        return found

    # A plain connection and positional rows: at 10,000 cells the ORM's per-row handling
    # is a good part of the time. The select's columns are CellResult's fields, in order.
    with store.engine.connect() as conn:
        result = conn.execute(stmt)
        assert tuple(result.keys()) == _CELL_FIELDS
        knob_index = _CELL_FIELDS.index("knobs")
        return [
            CellResult(*row[:knob_index], parsed(row[knob_index]), *row[knob_index + 1 :]) for row in result
        ]


def _chunks(ids: Iterable[int], size: int = 5000) -> Iterable[list[int]]:
    # Stay under SQLite's limit on parameters per statement (32,766 since 3.32) on any store.
    ids = list(dict.fromkeys(ids))
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def metric_totals_for(store: Store, run_ids: Iterable[int]) -> dict[int, dict[str, float]]:
    """Per run, each counter summed over the run's phases, as recorded in its
    ``run_samples`` row (one narrow row per run, not one row per counter and phase)."""
    out: dict[int, dict[str, float]] = {}
    with store.engine.connect() as conn:
        for chunk in _chunks(run_ids):
            for run_id, counters in conn.execute(
                select(RunSampleRow.run_id, RunSampleRow.counters).where(RunSampleRow.run_id.in_(chunk))
            ):
                if counters:
                    out[run_id] = counters
    return out


def latest_grades_for(store: Store, run_ids: Iterable[int]) -> dict[int, GradeDetail]:
    """Each run's newest grade, evidence included."""
    out: dict[int, GradeDetail] = {}
    with store.session() as session:
        for chunk in _chunks(run_ids):
            for g in session.scalars(
                select(GradeRow)
                .join(Run, Run.id == GradeRow.run_id)
                .where(Run.id.in_(chunk), GradeRow.id == _latest_grade_id())
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
            raise LookupError(f"no sweep {sweep_id}")
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
