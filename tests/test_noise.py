"""Run-to-run noise: two runs of one cell compared. Transcripts are hand-built
(no engine); the CLI test stores them in a real SQLite results DB first."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from vmatrix.cells import RunOutcome
from vmatrix.db.store import Store
from vmatrix.jobs.noise import repeatability
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.records import RequestRecord, Transcript


def rec(key: str, ids: list[int], logprobs: list[float], margins: list[float]) -> RequestRecord:
    return RequestRecord(key=key, session=key.split("/")[0], turn=0, phase="turn-0", token_ids=ids,
                         logprobs=logprobs, margins=margins)  # type: ignore[arg-type]


EARLIER = Transcript([rec("a/0", [1, 2, 3], [-0.1, -0.2, -0.3], [2.0, 0.05, 1.0]),
                      rec("b/0", [4, 5, 6], [-0.5, -0.5, -0.5], [1.0, 1.0, 0.12]),
                      rec("c/0", [7, 8], [-1.0, -1.0], [3.0, 3.0])])
LATER = Transcript([rec("a/0", [1, 9, 9], [-0.15, -0.9, -0.9], [2.0, 0.04, 1.0]),   # flips at token 1, margin 0.05
                    rec("b/0", [4, 5, 7], [-0.5, -0.52, -0.6], [1.0, 1.0, 0.1]),    # flips at token 2, margin 0.12
                    rec("c/0", [7, 8], [-1.0, -1.25], [3.0, 3.0])])                 # same text, drift 0.25


def test_repeatability_names_the_envelope() -> None:
    r = repeatability(LATER, EARLIER)
    assert (r.requests, r.identical, r.diverged, r.missing) == (3, 1, 2, 0)
    assert r.max_margin_at_divergence == 0.12  # the smallest tie_margin that grades it clean against itself
    assert r.drift_max == 0.25 and abs(r.drift_median - 0.05) < 1e-9
    assert r.first_index_median == 1.5


def test_noise_command_reads_the_latest_two_runs(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    spec = parse_spec(f"name: n\nengines: [{{vllm: '0.32.0'}}]\nmodel: {{path: {tmp_path / 'm'}}}\n", "m.yaml")
    [control] = expand(spec).cells
    db = tmp_path / "r.db"
    store = Store.open(db)
    sweep = store.create_sweep("n", "m.yaml", "")
    store.add_cell(sweep, control)
    now = time.time()
    for tx in (EARLIER, LATER):
        store.record_run(sweep, RunOutcome(control.id, "ok", now, now + 1, transcript=tx))
    store.close()
    out = CliRunner().invoke(app, ["results", "noise", "--db", str(db), "--format", "json"])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.output)
    assert row["cell_id"] == control.id and row["diverged"] == 2 and row["max_margin_at_divergence"] == 0.12

    empty = tmp_path / "e.db"
    Store.open(empty).close()
    out = CliRunner().invoke(app, ["results", "noise", "--db", str(empty)])
    assert out.exit_code == 2 and "no cell has two successful runs" in out.output


def _two_cell_sweep(tmp_path: Path, extra: str = ""):
    """A control and a prefix-caching cell of a model folder, added to a new sweep of a real
    results DB: (control, cell, db path, store, sweep id)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    text = (f"name: n\nengines: [{{vllm: '0.32.0'}}]\nmodel: {{path: {tmp_path / 'm'}}}\n"
            "axes: {prefix_caching: [false, true]}\n" + extra)
    plan = expand(parse_spec(text, "m.yaml"))
    control, cell = plan.cells
    db = tmp_path / "r.db"
    store = Store.open(db)
    sweep = store.create_sweep("n", "m.yaml", text)
    for c in plan.cells:
        store.add_cell(sweep, c)
    return control, cell, db, store, sweep


def test_regrade_appends_new_grades_and_keeps_the_old(tmp_path: Path) -> None:
    """Hand-built transcripts in a real results DB: a control and a cell that
    diverges confidently; regrading appends a grade, the first one stays."""
    from vmatrix.cells import Grade
    from vmatrix.db.queries import show_cell

    control, cell, db, store, sweep = _two_cell_sweep(tmp_path)
    now = time.time()
    store.record_run(sweep, RunOutcome(control.id, "ok", now, now + 1, transcript=EARLIER))
    bad = Transcript([rec("a/0", [1, 5, 5], [-0.1, -3.0, -3.0], [2.0, 2.0, 2.0]), *EARLIER.requests[1:]])
    run_id = store.record_run(sweep, RunOutcome(cell.id, "ok", now, now + 1, transcript=bad))
    store.record_grade(run_id, Grade("ungraded", "stale grade from an older grader"))
    store.close()

    out = CliRunner().invoke(app, ["results", "regrade", str(sweep), "--db", str(db)])
    assert out.exit_code == 0, out.output
    store = Store.open(db)
    [run] = show_cell(store, cell.id).runs
    assert [g.verdict for g in run.grades] == ["corrupt", "ungraded"]  # newest first, old one kept
    first = run.grades[0].evidence["first"]
    assert (first["session"], first["token_index"]) == ("a", 1)

    out = CliRunner().invoke(app, ["results", "regrade", "99", "--db", str(db)])
    assert out.exit_code == 2 and "no sweep 99" in out.output


def test_regrade_grades_recall_from_the_stored_expectations(tmp_path: Path) -> None:
    """Hand-built transcripts whose requests carry expectations, stored and read back by
    `results regrade`: every answer leaves the control at a near-tie (token by token only
    flips), and all five are wrong where the control's are right: corrupt on recall. The
    matrix's grading.logit_scale reaches the regrade too."""
    from vmatrix.db.queries import show_cell
    from vmatrix.expect import Expectation

    control, cell, db, store, sweep = _two_cell_sweep(tmp_path, "grading: {logit_scale: 12}\n")

    def run(answer: str, second: int) -> Transcript:
        reqs = [RequestRecord(key=f"s{i}/0", session=f"s{i}", turn=0, phase="turn-0", token_ids=[1, second],
                              logprobs=[-0.1, -0.1], margins=[2.0, 0.01], text=answer, answer_chars=len(answer),
                              expect=Expectation.exact("var_1 = alpha")) for i in range(5)]
        return Transcript(reqs, {"turn-0": {"vllm:prefix_cache_hits_total": 10.0}})

    now = time.time()
    store.record_run(sweep, RunOutcome(control.id, "ok", now, now + 1, transcript=run("var_1 = alpha", 2)))
    store.record_run(sweep, RunOutcome(cell.id, "ok", now, now + 1, transcript=run("var_1 = omega", 3)))
    store.close()

    out = CliRunner().invoke(app, ["results", "regrade", str(sweep), "--db", str(db)])
    assert out.exit_code == 0, out.output
    store = Store.open(db)
    [grade] = show_cell(store, cell.id).runs[0].grades
    assert grade.verdict == "corrupt" and grade.summary.startswith("recall 0/5 against the control's 5/5")
    assert grade.evidence["recall"]["b"] == 5 and grade.evidence["first"]["reason"] == "recall"
    assert (grade.evidence["logit_scale"], grade.evidence["tie_margin"]) == (12, 0.125)


def test_regrade_grades_runs_whose_matrix_now_expands_to_other_cells(tmp_path: Path) -> None:
    """Cells recorded under ids the matrix no longer expands to (here: changed by hand, as a
    change to the workload builder would) are graded from their stored rows: their runs are
    not left out."""
    from dataclasses import replace

    from vmatrix.db.queries import show_cell

    control, cell, db, store, sweep = _two_cell_sweep(tmp_path)
    old_control = replace(control, id="0" * 16)
    old_cell = replace(cell, id="1" * 16, control_id=old_control.id)
    for c in (old_control, old_cell):
        store.add_cell(sweep, c)
    now = time.time()

    def run(second: int) -> Transcript:
        return Transcript([RequestRecord(key="a/0", session="a", turn=0, phase="turn-0", token_ids=[1, second],
                                         logprobs=[-0.1, -0.1], margins=[2.0, 2.0])])

    store.record_run(sweep, RunOutcome(old_control.id, "ok", now, now + 1, transcript=run(2)))
    store.record_run(sweep, RunOutcome(old_cell.id, "ok", now, now + 1, transcript=run(3)))
    store.close()
    out = CliRunner().invoke(app, ["results", "regrade", str(sweep), "--db", str(db)])
    assert out.exit_code == 0, out.output
    [grade] = show_cell(Store.open(db), old_cell.id).runs[0].grades
    assert grade.verdict == "corrupt" and "first at session a turn 0 token 1" in grade.summary
