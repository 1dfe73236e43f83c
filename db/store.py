"""The results store: every write the orchestrator makes, each in its own transaction.

Short transactions keep the SQLite write lock brief, so the CLI can read a sweep's
results while the orchestrator is still recording them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from vmatrix.cells import Cell, Grade, RunOutcome
from vmatrix.db.models import (
    BisectRow,
    CellRow,
    FixesRow,
    GradeRow,
    MetricRow,
    NoiseFloorRow,
    RequestRow,
    Run,
    RunSampleRow,
    ShrinkRow,
    Sweep,
    SweepCell,
    latest_first,
    newest_grade_of,
)
from vmatrix.db.reads import ReadConn, placeholder_for, refuse_archive
from vmatrix.db.records import BisectRecord, CellStanding, FixesRecord, GradingRead, ShrinkRecord
from vmatrix.db.revision import HEAD_REVISION
from vmatrix.db.samples import summary_row
from vmatrix.errors import StoreError
from vmatrix.expect import Expectation
from vmatrix.records import Layout, RequestRecord, Transcript

if TYPE_CHECKING:
    from alembic.config import Config

    from vmatrix.jobs.noise import NoiseFloor  # the grader (~50 ms to import) is not needed to read results

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return versions[0] if len(versions) == 1 else None


def _holds_tables(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(inspect(conn).get_table_names())


def alembic_config(url: str | URL) -> Config:
    """Alembic settings for ``url``, built in code so no alembic.ini has to be found.

    Also the way to drive alembic by hand, e.g. ``command.revision(alembic_config(url), ...)``.
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # ConfigParser treats "%" as interpolation; URL-escaped passwords contain it.
    rendered = make_url(url).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def _request_columns(r: RequestRecord) -> dict[str, Any]:
    """A request's row values: its fields, the expectation in its JSON form."""
    return asdict(r) | {"expect": r.expect.to_json() if r.expect is not None else None}


def to_url(url_or_path: str | Path) -> URL:
    if isinstance(url_or_path, str) and "://" in url_or_path:
        try:
            url = make_url(url_or_path)
        except (ArgumentError, ValueError) as exc:
            raise StoreError("{db} {url!r}: not a SQLAlchemy URL ({why})", url=url_or_path, why=str(exc)) from None
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            # Migrations run on their own connection, which would see a different empty database.
            raise StoreError("{db} {url}: in-memory SQLite is not supported, use a file", url=url_or_path)
        if url.drivername == "postgresql":
            # SQLAlchemy's default PostgreSQL driver is psycopg2; the `pg` extra installs psycopg 3.
            url = url.set(drivername="postgresql+psycopg")
        return url
    path = Path(url_or_path).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return URL.create("sqlite", database=str(path))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (the CLI) run alongside the orchestrator's writes; the busy timeout
    # makes a second writer wait for the lock instead of failing at once.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Store:
    """Append-only record of sweeps, cells, runs and grades."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Returned rows stay readable after their session has closed.
        self.session: sessionmaker[Session] = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url_or_path: str | Path, *, migrate: bool = True) -> Store:
        """Open (creating or upgrading through migrations) a file path or a SQLAlchemy URL.

        SQLite files and PostgreSQL (``postgresql://`` or ``postgresql+psycopg://``, the
        ``pg`` extra) are tested; a URL that cannot be used raises :class:`StoreError`, and
        so does an xz archive (``NAME.db.xz``): it is read-only, and a read opens the copy
        :func:`db.copies.for_reading` unpacks, never the archive.

        ``migrate=False`` (a command that only reads): a store that holds a schema behind
        the newest migration is a :class:`StoreError`, not upgraded. A shared server has no
        copy to read (db/copies.py), and upgrading it under a read would change it for
        every other user, older vmatrix installs included. An empty database is still
        given the schema: nothing there to change.
        """
        refuse_archive(url_or_path)
        url = to_url(url_or_path)
        # A file is named as the user gave it; a URL without its password.
        shown = url.render_as_string(hide_password=True) if "://" in str(url_or_path) else str(url_or_path)
        try:
            engine = create_engine(url)
        except (ArgumentError, ImportError, NoSuchModuleError) as exc:
            hint = "; install it with pip install 'vmatrix[pg]'" if url.get_backend_name() == "postgresql" else ""
            raise StoreError("{db} {shown}: cannot load the database driver ({why}){hint}", shown=shown, why=str(exc),
                             hint=hint) from None
        if url.get_backend_name() == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        try:
            # At head already (the usual case): alembic is not even imported.
            revision = _current_revision(engine)
            if revision != HEAD_REVISION and not migrate and _holds_tables(engine):
                raise StoreError("{db} {shown}: its schema is at revision {revision}, behind this vmatrix's {head}; "
                                 "a read does not upgrade it: a command that writes to it (e.g. vmatrix results "
                                 "regrade, vmatrix sweep run) does", shown=shown, revision=revision or "none",
                                 head=HEAD_REVISION)
            if revision != HEAD_REVISION:
                from alembic import command

                command.upgrade(alembic_config(url), "head")
        except DatabaseError as exc:  # OperationalError, and "file is not a database" (a foreign file)
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc).splitlines()[0]
            raise StoreError("{db} {shown}: cannot open the database: {reason}", shown=shown, reason=reason) from None
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def reader(self) -> Iterator[ReadConn]:
        """The store's DB-API connection for ``db/reads.py``'s queries (one implementation
        of them, whichever way the store was opened); returned to the pool afterwards."""
        raw = self.engine.raw_connection()
        try:
            yield ReadConn(raw, self.engine.dialect.name, placeholder_for(self.engine.dialect.paramstyle))
        finally:
            raw.close()

    def create_sweep(self, name: str, spec_path: str, spec_text: str) -> int:
        sweep = Sweep(name=name, spec_path=spec_path, spec_text=spec_text, created_at=time.time())
        with self.session.begin() as session:
            session.add(sweep)
        return sweep.id

    def sweep(self, sweep_id: int) -> Sweep | None:
        with self.session() as session:
            return session.get(Sweep, sweep_id)

    def finish_sweep(self, sweep_id: int) -> None:
        with self.session.begin() as session:
            sweep = session.get_one(Sweep, sweep_id)
            sweep.finished_at = time.time()

    def add_cell(self, sweep_id: int, cell: Cell) -> None:
        """Store ``cell`` unless known and link it to the sweep; repeating it changes nothing."""
        with self.session.begin() as session:
            if session.get(CellRow, cell.id) is None:
                session.add(
                    CellRow(
                        id=cell.id,
                        engine_label=cell.engine.label,
                        env_id=cell.engine.env_id,
                        vllm_version=cell.engine.vllm,
                        accelerator=cell.engine.accelerator,
                        patches=cell.engine.patches,
                        lmcache=cell.engine.lmcache,
                        knobs=cell.knobs,
                        model_digest=cell.model.digest,
                        model_name=cell.model.name,
                        workload_digest=cell.workload_digest,
                        spec=cell.to_json(),
                        control_id=cell.control_id,
                        created_at=time.time(),
                    )
                )
            if session.get(SweepCell, (sweep_id, cell.id)) is None:
                role = "control" if cell.is_control else "cell"
                session.add(SweepCell(sweep_id=sweep_id, cell_id=cell.id, role=role))

    def cell_spec(self, cell_id: str) -> dict[str, Any] | None:
        """A stored cell as it was recorded (``Cell.to_json``); None if unknown."""
        with self.session() as session:
            row = session.get(CellRow, cell_id)
            return dict(row.spec) if row is not None else None

    def run(self, run_id: int) -> Run:
        with self.session() as session:
            return session.get_one(Run, run_id)

    def latest_run(self, cell_id: str) -> Run | None:
        with self.session() as session:
            return _latest_run(session, cell_id)

    def control_run(self, control_cell_id: str) -> Run | None:
        """The control run a cell is graded against, when none sent its requests: the newest the
        engine ran (a `task_failed` one says nothing of the stack), else the newest."""
        with self.session() as session:
            return _control_run(session, control_cell_id)

    def record_run(self, sweep_id: int, outcome: RunOutcome) -> int:
        """Insert the run with its requests, metrics and their summary, all or nothing; returns
        the new run id."""
        run = Run(
            cell_id=outcome.cell_id,
            sweep_id=sweep_id,
            status=outcome.status,
            signature=outcome.signature,
            message=outcome.message,
            fingerprint=outcome.fingerprint,
            timings=outcome.timings,
            log_path=outcome.log_path,
            node=outcome.node,
            gpu_ids=outcome.gpu_ids,
            attempts=outcome.attempts,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
            aborted_early=outcome.transcript.aborted_early if outcome.transcript else None,
            skipped_requests=list(outcome.transcript.skipped) if outcome.transcript else None,
            layout=outcome.transcript.layout.to_json() if outcome.transcript and outcome.transcript.layout else None,
        )
        with self.session.begin() as session:
            session.add(run)
            session.flush()  # assigns run.id for the child rows
            transcript = outcome.transcript
            if transcript is not None:
                session.add_all(RequestRow(run_id=run.id, **_request_columns(r)) for r in transcript.requests)
                session.add_all(
                    MetricRow(run_id=run.id, phase=phase, name=name, value=value)
                    for phase, samples in transcript.metrics.items()
                    for name, value in samples.items()
                )
                # What comparisons read, in one narrow row (db/samples.py).
                summary = summary_row(run.id, transcript.requests, transcript.metrics)
                if summary is not None:
                    session.add(RunSampleRow(**summary))
        return run.id

    def record_grade(self, run_id: int, grade: Grade) -> int:
        row = GradeRow(
            run_id=run_id,
            control_run_id=grade.control_run_id,
            verdict=grade.verdict,
            summary=grade.summary,
            evidence=grade.evidence,
            created_at=time.time(),
        )
        with self.session.begin() as session:
            session.add(row)
        return row.id

    def record_bisect(self, record: BisectRecord) -> int:
        """Append what a bisect found; returns its id."""
        values = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in ("id", "created_at")}
        row = BisectRow(**values, created_at=time.time())
        with self.session.begin() as session:
            session.add(row)
        return row.id

    def bisects(self, old_cell_id: str | None = None, new_cell_id: str | None = None) -> list[BisectRecord]:
        """Recorded bisects, oldest first; only those between these two cells when given."""
        stmt = select(BisectRow).order_by(BisectRow.id)
        if old_cell_id is not None:
            stmt = stmt.where(BisectRow.old_cell_id == old_cell_id)
        if new_cell_id is not None:
            stmt = stmt.where(BisectRow.new_cell_id == new_cell_id)
        with self.session() as session:
            return [BisectRecord.from_row(row) for row in session.scalars(stmt)]

    def record_fixes(self, record: FixesRecord) -> int:
        """Append what ``vmatrix fixes`` found; returns its id."""
        values = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in ("id", "created_at")}
        row = FixesRow(**values, created_at=time.time())
        with self.session.begin() as session:
            session.add(row)
        return row.id

    def record_shrink(self, record: ShrinkRecord) -> int:
        """Append what a shrink found; returns its id."""
        values = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in ("id", "created_at")}
        row = ShrinkRow(**values, created_at=time.time())
        with self.session.begin() as session:
            session.add(row)
        return row.id

    def fixes(self, cell_id: str | None = None) -> list[FixesRecord]:
        """Recorded fix searches, oldest first; only those about CELL_ID when given."""
        stmt = select(FixesRow).order_by(FixesRow.id)
        if cell_id is not None:
            stmt = stmt.where(FixesRow.cell_id == cell_id)
        with self.session() as session:
            return [FixesRecord.from_row(row) for row in session.scalars(stmt)]

    def shrinks(self, cell_id: str) -> list[ShrinkRecord]:
        """The shrinks of a cell, oldest first."""
        with self.session() as session:
            rows = session.scalars(select(ShrinkRow).where(ShrinkRow.cell_id == cell_id).order_by(ShrinkRow.id))
            return [ShrinkRecord.from_row(row) for row in rows]

    def latest_grade(self, run_id: int) -> GradeRow | None:
        with self.session() as session:
            return session.scalars(select(GradeRow).where(GradeRow.id == newest_grade_of(run_id))).first()

    def grades_of(self, run_id: int) -> list[GradeRow]:
        """Every grade of a run, newest first (grades are appended, never rewritten)."""
        with self.session() as session:
            return _grades_of(session, run_id)

    def regrade_read(self, run_id: int) -> tuple[Transcript, list[GradeRow]]:
        """What grading a recorded run again reads of it, in one session: its transcript,
        and its grades so far, newest first (the engine's block an earlier grade kept)."""
        with self.session() as session:
            return _transcript(session, session.get_one(Run, run_id)), _grades_of(session, run_id)

    def requests_for(self, run_id: int) -> list[RequestRecord]:
        with self.session() as session:
            return _requests(session, run_id)

    def metrics_for(self, run_id: int) -> dict[str, dict[str, float]]:
        with self.session() as session:
            return _metrics(session, run_id)

    def transcript_for(self, run_id: int) -> Transcript:
        """A recorded run's replay as the grader reads it, skipped requests included."""
        with self.session() as session:
            return _transcript(session, session.get_one(Run, run_id))

    def grading_read(self, control_cell_id: str, sweep_id: int | None = None,
                     sibling_cell_id: str | None = None, requests_digest: str | None = None) -> GradingRead:
        """Everything grading a cell reads, in one session: the control's newest run not `task_failed` (with
        ``requests_digest``: its newest ok run that sent those, if any) and its transcript if ok, the sweep's
        noise floor for it (``sweep_id`` given), the newest run of ``sibling_cell_id`` and its transcript if ok."""
        with self.session() as session:
            sent = _ok_run_sending(session, control_cell_id, requests_digest) if requests_digest else None
            control = sent or _control_run(session, control_cell_id)
            sibling = _latest_run(session, sibling_cell_id) if sibling_cell_id else None
            measured = _noise_floor(session, sweep_id, control_cell_id) if sweep_id is not None else None
            return GradingRead(
                control, _transcript(session, control) if control is not None and control.status == "ok" else None,
                measured[0] if measured else None,
                sibling, _transcript(session, sibling) if sibling is not None and sibling.status == "ok" else None)

    def standings(self, cell_ids: list[str], sweep_id: int | None = None) -> dict[str, CellStanding]:
        """Where each cell stands (:class:`CellStanding`), read in one session."""
        out: dict[str, CellStanding] = {}
        with self.session() as session:
            for cell_id in dict.fromkeys(cell_ids):
                latest = _latest_run(session, cell_id)
                grade = session.scalars(select(GradeRow.verdict).where(GradeRow.id == newest_grade_of(latest.id))
                                        ).first() if latest is not None else None
                ok = len(session.scalars(_ok_runs(cell_id).with_only_columns(Run.id).limit(2)).all())
                floor = sweep_id is not None and _noise_floor(session, sweep_id, cell_id) is not None
                out[cell_id] = CellStanding(latest, grade, ok, floor)
        return out

    def ok_runs(self, cell_id: str, limit: int = 2) -> list[Run]:
        """The cell's newest runs that finished ok, newest first."""
        with self.session() as session:
            return list(session.scalars(_ok_runs(cell_id).limit(limit)))

    def ok_run_sending(self, cell_id: str, requests_digest: str) -> Run | None:
        with self.session() as session:
            return _ok_run_sending(session, cell_id, requests_digest)

    def ok_transcripts(self, cell_id: str, limit: int = 2) -> list[tuple[Run, Transcript]]:
        """The cell's newest runs that finished ok, newest first, each with its transcript,
        in one session: a control's noise floor and its early-abort reference read them."""
        with self.session() as session:
            runs = session.scalars(_ok_runs(cell_id).limit(limit))
            return [(run, _transcript(session, run)) for run in runs]

    def record_noise_floor(self, sweep_id: int, control_cell_id: str, run_id: int, repeat_run_id: int,
                           floor: NoiseFloor) -> int:
        row = NoiseFloorRow(sweep_id=sweep_id, control_cell_id=control_cell_id, run_id=run_id,
                            repeat_run_id=repeat_run_id, created_at=time.time(), **floor.to_json())
        with self.session.begin() as session:
            session.add(row)
        return row.id

    def noise_floor(self, sweep_id: int, control_cell_id: str) -> tuple[NoiseFloor, int] | None:
        """The sweep's newest noise floor for a control, with the control run it was measured on."""
        with self.session() as session:
            return _noise_floor(session, sweep_id, control_cell_id)


def _latest_run(session: Session, cell_id: str, *where: Any) -> Run | None:
    return session.scalars(select(Run).where(Run.cell_id == cell_id, *where).order_by(*latest_first()).limit(1)).first()


def _control_run(session: Session, cell_id: str) -> Run | None:
    return _latest_run(session, cell_id, Run.status != "task_failed") or _latest_run(session, cell_id)


def _ok_runs(cell_id: str) -> Any:
    return select(Run).where(Run.cell_id == cell_id, Run.status == "ok").order_by(*latest_first())


def _ok_run_sending(session: Session, cell_id: str, requests_digest: str) -> Run | None:
    """The cell's newest ok run (of 32: a pair per sweep, and one a cell's block) that sent these."""
    runs = session.scalars(_ok_runs(cell_id).limit(32))
    return next((r for r in runs if (r.layout or {}).get("requests_digest") == requests_digest), None)


def _grades_of(session: Session, run_id: int) -> list[GradeRow]:
    return list(session.scalars(select(GradeRow).where(GradeRow.run_id == run_id).order_by(GradeRow.id.desc())))


def _requests(session: Session, run_id: int) -> list[RequestRecord]:
    rows = session.scalars(select(RequestRow).where(RequestRow.run_id == run_id).order_by(RequestRow.id))
    # `or []`: itl_s is NULL on runs recorded before it was measured (0007); expect is
    # NULL on runs recorded before expectations (0008): no expectation.
    return [RequestRecord(**{f.name: getattr(r, f.name) for f in fields(RequestRecord)}
                          | {"itl_s": r.itl_s or [], "expect": Expectation.from_json(r.expect) if r.expect else None})
            for r in rows]


def _metrics(session: Session, run_id: int) -> dict[str, dict[str, float]]:
    rows = session.execute(
        select(MetricRow.phase, MetricRow.name, MetricRow.value).where(MetricRow.run_id == run_id).order_by(MetricRow.id)
    )
    metrics: dict[str, dict[str, float]] = {}
    for phase, name, value in rows:
        metrics.setdefault(phase, {})[name] = value
    return metrics


def _transcript(session: Session, run: Run) -> Transcript:
    return Transcript(_requests(session, run.id), _metrics(session, run.id), bool(run.aborted_early),
                      list(run.skipped_requests or ()), Layout.from_json(run.layout))


def _noise_floor(session: Session, sweep_id: int, control_cell_id: str) -> tuple[NoiseFloor, int] | None:
    row = session.scalars(
        select(NoiseFloorRow)
        .where(NoiseFloorRow.sweep_id == sweep_id, NoiseFloorRow.control_cell_id == control_cell_id)
        .order_by(NoiseFloorRow.id.desc()).limit(1)
    ).first()
    if row is None:
        return None
    from vmatrix.jobs.noise import NoiseFloor

    return NoiseFloor(row.requests, row.identical, row.flips, row.max_drift, row.max_flip_margin), row.run_id
