"""The command line on bad input: one line naming file, line and field; exit code 2."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from vmatrix.orchestrator.cli import app

runner = CliRunner()
QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.yaml"


def test_plan_prints_cells_without_running_anything() -> None:
    result = runner.invoke(app, ["sweep", "plan", str(QUICKSTART)])
    assert result.exit_code == 0, result.output
    assert "4 cells (1 controls)" in result.output


def test_plan_with_db_shows_what_is_recorded_and_creates_no_results_file(tmp_path: Path) -> None:
    """Hand-recorded run (no engine): `sweep plan --db` shows each cell's newest verdict,
    so a user sees what `sweep run` would skip; a results file that is not there stays so."""
    import time

    from vmatrix.cells import Grade, RunOutcome
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec
    from vmatrix.records import Transcript

    missing = tmp_path / "none.db"
    result = runner.invoke(app, ["sweep", "plan", str(QUICKSTART), "--db", str(missing)])
    assert result.exit_code == 0 and "recorded" not in result.output and not missing.exists()

    plan = expand(load_spec(QUICKSTART, check_index=False), str(QUICKSTART))
    db = tmp_path / "r.db"
    store = Store.open(db)
    sweep = store.create_sweep("q", str(QUICKSTART), QUICKSTART.read_text())
    cell = next(c for c in plan.cells if not c.is_control)
    store.add_cell(sweep, cell)
    run = store.record_run(sweep, RunOutcome(cell.id, "ok", time.time(), time.time(), transcript=Transcript()))
    store.record_grade(run, Grade("clean", "hand-written"))
    store.close()
    result = runner.invoke(app, ["sweep", "plan", str(QUICKSTART), "--db", str(db)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if cell.id in line and "cell " in line)
    assert f"run {run}: clean" in row


def test_results_ls_reads_at_80_columns(tmp_path: Path) -> None:
    """Hand-recorded runs of the quickstart's cells (no engine): at 80 columns every line
    fits, knobs wrap between knobs and a run is at most two lines; wider, the signature shows."""
    import time

    from vmatrix.cells import Grade, RunOutcome
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec
    from vmatrix.records import Transcript

    plan = expand(load_spec(QUICKSTART, check_index=False), str(QUICKSTART))
    db = tmp_path / "r.db"
    store = Store.open(db)
    sweep = store.create_sweep("q", str(QUICKSTART), QUICKSTART.read_text())
    for cell in plan.cells:
        store.add_cell(sweep, cell)
        crashed = cell.knobs.get("prefix_caching") and cell.knobs.get("speculative")
        run = store.record_run(sweep, RunOutcome(cell.id, "crashed" if crashed else "ok", time.time() - 40, time.time(),
                                                 signature="TypeError: 'function' object is not subscriptable"
                                                 if crashed else None, transcript=Transcript()))
        store.record_grade(run, Grade("crashed" if crashed else "clean", "hand-written"))
    store.close()
    narrow = runner.invoke(app, ["results", "ls", "--db", str(db)], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert all(len(line) <= 80 for line in lines) and "signature" not in narrow.output
    body = [line for line in lines if line.startswith("│")]
    assert len(body) <= 2 * len(plan.cells), narrow.output
    assert any("│ spec=mtp:2" in line for line in body) and not any("prefix_ca " in line for line in body)
    wide = runner.invoke(app, ["results", "ls", "--db", str(db)], env={"COLUMNS": "160"})
    assert "signature" in wide.output and "prefix_caching=on, spec=mtp:2" in wide.output


def test_bad_matrix_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("prefix_caching: [", "prefix_cachng: ["))
    result = runner.invoke(app, ["sweep", "run", str(bad), "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "axes.prefix_cachng: unknown knob" in lines[0] and "bad.yaml:" in lines[0]
    assert not (tmp_path / "r.db").exists(), "nothing is recorded for a matrix that does not parse"


def test_results_commands_on_an_empty_database(tmp_path: Path) -> None:
    from vmatrix.db.store import Store

    db = str(tmp_path / "r.db")
    Store.open(db).close()  # made by a write (a read of a file that is not there is an error)
    assert runner.invoke(app, ["results", "ls", "--db", db]).exit_code == 0
    result = runner.invoke(app, ["results", "show", "abc", "--db", db])
    assert result.exit_code == 2 and "abc" in result.output
    result = runner.invoke(app, ["results", "table", "--db", db, "--format", "yaml"])
    assert result.exit_code == 2 and "--format" in result.output


def test_plan_with_cell_selectors_keeps_the_picked_cells_and_their_controls() -> None:
    """A hunting matrix is run part by part: `--cell` picks cells (the bisect grammar) and
    brings each one's control; the plan names cold races that may not fragment."""
    matrix = Path(__file__).parent.parent / "examples" / "field-bugs-gpu.yaml"
    result = runner.invoke(app, ["sweep", "plan", str(matrix), "--engine", "0.25.1",
                                 "--cell", "prefix_caching=on,speculative=mtp:3"])
    assert result.exit_code == 0, result.output
    # PC + MTP k=3 at the default async and with it off, and their one control.
    assert "3 cells (1 controls)" in result.output
    assert "cold_race: fragments only if the engine's block exceeds 11 tokens" in " ".join(result.output.split())
    bad = runner.invoke(app, ["sweep", "plan", str(matrix), "--cell", "prefix_caching"])
    assert bad.exit_code == 2 and "--cell: 'prefix_caching' is not KEY=VALUE" in bad.output
