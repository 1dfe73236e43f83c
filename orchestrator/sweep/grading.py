"""Grading recorded runs: one service that the sweep and `vmatrix results regrade` both call.

What a cell is graded with (its control's newest run, the noise floor measured for the
sweep, the model's tie margin and end-of-turn tokens, what the cell exercised) is put
together here, then handed to the grader (``jobs.grade``) and the grade appended to the
store. The sweep grades a cell as soon as its run and its control's are recorded
(:func:`grade_cell`), and late ones once their control has run (:func:`grade_waiting`);
a regrade goes through :func:`regrade_run`. docs/GRADING.md says what the rules are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vmatrix.cells import Cell, Grade, RunOutcome, model_end_tokens
from vmatrix.db.models import GradeRow, Run
from vmatrix.db.records import CellStanding, GradingRead
from vmatrix.db.store import Store
from vmatrix.images.recipe import planted_lines
from vmatrix.jobs.grade import PREFIX_HITS, Exercised, grade_transcripts
from vmatrix.jobs.noise import NoiseFloor, noise_floor, scaled_tie_margin
from vmatrix.jobs.shape_grade import Placed, Shaped
from vmatrix.jobs.shapes import fragments
from vmatrix.jobs.workload import build_workload
from vmatrix.orchestrator.plan.canary import excused_symptoms, logit_scale
from vmatrix.orchestrator.plan.matrix import Plan
from vmatrix.orchestrator.runtimes.signature import engine_block_tokens
from vmatrix.orchestrator.spec.workload import Grading, WorkloadSpec, workload_spec
from vmatrix.orchestrator.stack.geometry import lmcache_on
from vmatrix.orchestrator.sweep.planted import judge, planted_counts
from vmatrix.records import Layout, Transcript


def exercised(cell: Cell) -> Exercised:
    """What a cell claims to test, for the grader's coverage check: its knobs, and the
    restart points of its workload."""
    knobs = cell.knobs
    workload = workload_spec(cell)
    return Exercised(
        prefix_caching=bool(knobs.get("prefix_caching")),
        speculative=knobs.get("speculative") is not None,
        lmcache=lmcache_on(knobs),
        restart_points=() if workload.shapes is not None else build_workload(workload).restart_points,
        probe_block_tokens=workload.probe_block_tokens if workload.shapes is None else None,
    )


def shaped(cell: Cell, layout: Layout | None) -> Shaped | None:
    """A shaped cell's requests as its run laid them out (its recorded layout), with what its
    knobs make of them; None for an unshaped workload."""
    spec = workload_spec(cell)
    if spec.shapes is None or layout is None or layout.block_tokens is None:
        return None
    kinds = {s.name: s.kind for s in spec.shapes}
    # Rebuilt by the builders the run was laid out by (its recorded version), not today's.
    version = layout.layout_version
    placed = {r.key: Placed(r.shape, kinds[r.shape], r.phase, r.claim, json.dumps(r.messages), r.repeat)
              for r in build_workload(spec, layout.block_tokens, version).requests}
    speculative = cell.knobs.get("speculative")
    budget, seqs = cell.knobs.get("max_num_batched_tokens"), cell.knobs.get("max_num_seqs")
    return Shaped(placed, layout.block_tokens, speculative["num_speculative_tokens"] if speculative else None,
                  {s.name: fragments(s, layout.block_tokens, budget, seqs, long=version >= 2 and s.block_drop)
                   for s in spec.shapes if s.kind == "cold_race"})


def layout_mismatch(cell: Transcript, control: Transcript) -> str | None:
    """Why a shaped cell's requests are not its control's (each laid out on its own engine's
    block); None when they are the same."""
    a, b = cell.layout, control.layout
    if a is None or b is None or a.requests_digest == b.requests_digest:
        return None
    return (f"the control's requests were laid out on {b.block_tokens}-token blocks ({b.source}), this cell's on "
            f"{a.block_tokens} ({a.source}): they sent other prompts, and no ok control run sent this cell's (a sweep "
            f"runs the control on the cell's block when it grades the cell; or set the workload's probe_block_tokens "
            "to lay both out on one block)")


def _requests_digest(outcome: RunOutcome) -> str | None:
    layout = outcome.transcript.layout if outcome.transcript is not None else None
    return layout.requests_digest if layout is not None else None


def control_block_needed(store: Store, cell: Cell, layout: Layout | None) -> int | None:
    """The block a control run must lay its shaped workload out on before this cell's ok run
    (laid out as ``layout``) can be graded: the cell's, when its engine chose another block
    than the control's runs were laid out on (a Mamba2 model's prefix-cached block is a
    multiple of its scan chunk, its plain block is not) and no ok control run sent the cell's
    requests; None otherwise."""
    if (cell.is_control or not cell.control_id or layout is None or layout.requests_digest is None
            or layout.block_tokens is None):
        return None
    if store.ok_run_sending(cell.control_id, layout.requests_digest) is not None:
        return None
    control = store.control_run(cell.control_id)
    # Only beside a control that ran ok: a failed one is the grade's answer, not a layout's.
    if control is None or control.status != "ok" or control.layout is None:
        return None
    return layout.block_tokens


def model_logit_scale(grading: Grading, model_name: str, folder: str | None = None) -> float | None:
    """``grading.logit_scale``, or the one the model's build recorded (a canary's, or a model folder's)."""
    return grading.logit_scale if grading.logit_scale is not None else logit_scale(model_name, folder)


def end_tokens_for(cell: Cell) -> frozenset[int]:
    """The end-of-turn ids of the cell's model: the grader compares answers up to them."""
    return model_end_tokens(cell.model.path)


def tie_margin_for(grading: Grading, model_name: str, folder: str | None = None) -> float:
    """The tie margin before any noise floor: the configured one, raised to
    ``grading.tie_steps`` bf16 steps at the model's logit scale when that is known."""
    return scaled_tie_margin(grading.tie_margin, grading.tie_steps, model_logit_scale(grading, model_name, folder))


def grade_cell(
    store: Store, cell: Cell, outcome: RunOutcome, grading: Grading, sweep_id: int | None = None,
    engine_block: int | None = None, earlier: list[dict] | None = None,
) -> Grade:
    """Turn a recorded outcome into a verdict, against the control's latest run.

    With ``grading.calibrate`` the noise floor the sweep measured for the control is used.
    ``engine_block``: the engine's block when its log is not at hand (a regrade elsewhere);
    ``earlier``: the run's earlier grades' evidence, newest first (what a planted set did).
    """
    if outcome.status != "ok":
        return Grade(outcome.status, outcome.signature or outcome.message or outcome.status, _failure_evidence(outcome))
    if cell.is_control:
        return Grade("control", "reference run for its cells")
    if not cell.control_id:
        return Grade("ungraded", "control has not run")
    # All the store has for this grade, read at once: the control's newest run and its
    # transcript, the sweep's noise floor, and the sibling a finding compares hits with.
    read = store.grading_read(cell.control_id, sweep_id if grading.calibrate else None, _sibling_id(cell),
                              _requests_digest(outcome))
    control = read.control
    if control is None:
        return Grade("ungraded", "control has not run")
    if control.status != "ok":
        return Grade("ungraded", f"control {control.status}: {control.signature or ''}".strip(), control_run_id=control.id)
    assert outcome.transcript is not None and read.control_transcript is not None
    control_transcript = read.control_transcript
    if mismatch := layout_mismatch(outcome.transcript, control_transcript):
        return Grade("ungraded", mismatch, {"layout": outcome.transcript.layout.to_json()},  # type: ignore[union-attr]
                     control_run_id=control.id)
    floor: NoiseFloor | None = read.floor
    ignore = set(grading.ignore_symptoms) | set(excused_symptoms(cell.model.name))
    layout = outcome.transcript.layout
    log = _engine_log(outcome.log_path)  # once: for the engine's block and the planted sets
    block = (engine_block_tokens(log) if log is not None else None) or _layout_block(layout) or engine_block
    verdict, summary, evidence = grade_transcripts(
        outcome.transcript, control_transcript, grading.tie_margin, grading.max_tie_flip_fraction,
        floor, sorted(ignore), exercised(cell), tie_steps=grading.tie_steps,
        logit_scale=model_logit_scale(grading, cell.model.name, cell.model.path), end_tokens=end_tokens_for(cell),
        block_tokens=block,
        shaped=shaped(cell, layout),
    )
    # Kept with the grade: a regrade on a machine without the engine's log reads it here.
    evidence["engine_block"] = block
    if layout is not None:
        evidence["layout"] = layout.to_json()
        if layout.source == "guessed" and evidence.get("coverage"):
            evidence["coverage"]["gaps"].append(
                f"the engine did not say its block size: the shapes were laid out on a guess of {layout.block_tokens}")
            if verdict in ("clean", "partial"):
                verdict, summary = "unexercised", f"not exercised: {evidence['coverage']['gaps'][-1]}"
    if cell.knobs.get("prefix_caching") and (lines := planted_lines(cell.engine)):
        counts = planted_counts(lines, log, earlier or ())
        verdict, summary = judge(verdict, summary, evidence, counts, lines)
    if verdict == "unexercised" and (finding := _hits_lost_to_spec(read, workload_spec(cell), outcome.transcript)):
        evidence["finding"] = finding
        summary = f"{summary}; {finding}"
    return Grade(verdict, summary, evidence, control.id)  # type: ignore[arg-type]


def _sibling_id(cell: Cell) -> str | None:
    """The same cell without speculative decoding, for a prefix-caching cell with it (the
    finding of :func:`_hits_lost_to_spec`); None for any other cell."""
    if not cell.knobs.get("prefix_caching") or not cell.knobs.get("speculative"):
        return None
    return Cell.make_id(cell.engine, {**cell.knobs, "speculative": None}, cell.model.digest, cell.workload_digest)


def _hits_lost_to_spec(read: GradingRead, spec: WorkloadSpec, transcript: Transcript) -> str | None:
    """vLLM issue 45238 as a finding: a prefix-caching cell with speculative decoding that
    hit nothing (in a shape, for a shaped workload; else in the whole run), where the same
    cell without speculative decoding (``read.sibling``) hit there."""
    run, theirs = read.sibling, read.sibling_transcript
    if run is None or theirs is None:
        return None
    lost = [f"{where} ({hits:.0f} tokens hit there without it)"
            for where, (mine, hits) in _hits_by_place(spec, transcript, theirs).items() if mine == 0 and hits > 0]
    if not lost:
        return None
    return (f"finding (vLLM issue 45238): with speculative decoding no prefix-cache hit in {'; '.join(lost)}, "
            f"where the same cell without it (run {run.id}) hit")


def _hits_by_place(spec: WorkloadSpec, mine: Transcript, theirs: Transcript) -> dict[str, tuple[float, float]]:
    """Prefix-cache hits of two runs of a cell's workload: per shape from each request's
    reported hit, or over the whole run from the counters (unshaped, or not reported)."""
    if spec.shapes is not None and all(
            r.cached_tokens is not None for r in mine.requests + theirs.requests):
        out: dict[str, list[float]] = {}
        for n, t in enumerate((mine, theirs)):
            for r in t.requests:
                # A shape's phases are named "<shape>/<wave>" (jobs/shapes.py).
                out.setdefault(f"shape {r.phase.rpartition('/')[0]}", [0.0, 0.0])[n] += r.cached_tokens or 0
        return {k: (v[0], v[1]) for k, v in out.items()}
    total = [sum(p.get(PREFIX_HITS, 0.0) for p in t.metrics.values()) for t in (mine, theirs)]
    return {"the run": (total[0], total[1])}


def _layout_block(layout: Layout | None) -> int | None:
    return layout.attention_block if layout is not None else None


def _graded_block(cell: Cell, earlier: list[GradeRow]) -> int | None:
    """The engine's block as an earlier grade of the run knew it (from the engine's log, on
    the machine that ran it): kept with the grade, or, for grades made before it was kept,
    the probe's block when that grade checked it against the log and found nothing amiss."""
    probe = workload_spec(cell).probe_block_tokens
    for row in earlier:
        evidence = row.evidence or {}
        if evidence.get("engine_block"):
            return int(evidence["engine_block"])
        cov = evidence.get("coverage") or {}
        said = [*cov.get("gaps", []), *cov.get("unmeasured", [])]
        # Only a grade that checked the probe (its claim names probe_block_tokens) and found
        # nothing to say of the block saw the engine's log say the probe's block.
        checked = "probe_block_tokens" in (cov.get("exercised") or {})
        if probe and checked and "engine_block" not in evidence and not any("block" in line for line in said):
            return probe
    return None


def _engine_log(log_path: str | None) -> str | None:
    """The run's engine log, None when it is not at hand (a regrade on another machine)."""
    try:
        return Path(log_path).read_text(errors="replace") if log_path else None
    except OSError:
        return None


def _failure_evidence(outcome: RunOutcome) -> dict:
    """Where a failed run stopped: the signature, and the first request that failed."""
    evidence: dict = {"signature": outcome.signature, "message": outcome.message}
    failed = next((r for r in outcome.transcript.requests if r.error), None) if outcome.transcript else None
    if failed is not None:
        evidence["first"] = {"reason": "request failed", "key": failed.key, "session": failed.session,
                             "turn": failed.turn, "token_index": len(failed.token_ids), "cell_text": failed.text,
                             "error": failed.error}
    return evidence


def will_grade(standing: Mapping[str, CellStanding], plan: Plan, control: Cell, todo_ids: set[str]) -> bool:
    """Whether some cell of ``control`` runs now or waits, ungraded, for a grade
    (``standing``: the plan's cells, as :meth:`Store.standings` read them)."""
    for cell in plan.cells:
        if cell.control_id != control.id:
            continue
        if cell.id in todo_ids:
            return True
        if _waits_for_grade(standing[cell.id]):
            return True
    return False


def _waits_for_grade(standing: CellStanding) -> bool:
    run = standing.latest
    return run is not None and run.status == "ok" and standing.verdict in (None, "ungraded")


@dataclass
class Calibration:
    """What calibrating a sweep's controls asks of its schedule (``grading.calibrate``)."""

    runs_of: dict[str, int] = field(default_factory=dict)  # control id -> its tasks in this sweep
    calibrating: set[str] = field(default_factory=set)  # floors measured once these controls' tasks end
    again: list[Cell] = field(default_factory=list)  # recorded controls that run once more


def plan_calibration(store: Store, plan: Plan, standing: Mapping[str, CellStanding], todo_ids: set[str],
                     sweep_id: int) -> Calibration:
    """Which controls run twice, or once more beside a recorded ok run, so that the sweep
    measures their noise floor; a control with two ok runs recorded has its floor measured
    here, from them. A control none of whose cells is graded in this sweep runs once
    (engine time for nothing otherwise). ``standing``: the plan's cells as the sweep read
    them (:meth:`Store.standings`)."""
    out = Calibration()
    if not plan.spec.grading.calibrate:
        return out
    for control in plan.controls:
        mine = standing[control.id]
        if control.id in todo_ids:
            if will_grade(standing, plan, control, todo_ids):
                out.runs_of[control.id] = 2
                out.calibrating.add(control.id)
        elif mine.ok_count == 2 and (mine.has_floor or calibrate(store, sweep_id, control) is not None):
            pass  # from the recorded runs, nothing to run
        # One more run where the recorded ones make no pair (one ok run; or two that sent
        # other requests: one was laid out on a cell's block).
        elif mine.ok_count and mine.latest is not None and mine.latest.status == "ok" and will_grade(
            standing, plan, control, todo_ids
        ):
            out.runs_of[control.id] = 1  # one more run, measured against the recorded one
            out.calibrating.add(control.id)
            out.again.append(control)
    return out


def calibrate(store: Store, sweep_id: int, control: Cell) -> NoiseFloor | None:
    """Measure and store the noise floor from the control's two newest ok runs that sent the
    same requests (a run laid out on a cell's block, FOLLOWS_CELLS, sent others)."""
    pair = _same_requests_pair(store.ok_transcripts(control.id, CALIBRATION_SEARCH))
    if pair is None:
        return None
    (newest, latest), (repeat, earlier) = pair
    try:
        floor = noise_floor(earlier, latest, end_tokens_for(control))
    except ValueError:
        return None
    store.record_noise_floor(sweep_id, control.id, newest.id, repeat.id, floor)
    return floor


# How many of a control's newest ok runs calibration looks through for a pair that sent
# the same requests: two of its own and one per block its cells chose, in one sweep.
CALIBRATION_SEARCH = 8


def _same_requests_pair(runs: list[tuple[Run, Transcript]]) -> tuple[tuple[Run, Transcript], ...] | None:
    """The newest two runs (newest first) whose requests were laid out alike."""
    seen: dict[object, tuple[Run, Transcript]] = {}
    for run, transcript in runs:
        key = transcript.layout.requests_digest if transcript.layout is not None else None
        if key in seen:
            return seen[key], (run, transcript)
        seen[key] = (run, transcript)
    return None


def waiting_blocks(plan: Plan, store: Store, standing: Mapping[str, CellStanding],
                   skipped: list[str]) -> set[tuple[str, int]]:
    """(control id, block) for the recorded cells that wait, ungraded, for a control run laid
    out on their block (:func:`control_block_needed`): the sweep runs those controls too.
    ``standing``: the plan's cells as the sweep read them (:meth:`Store.standings`)."""
    by_id = {c.id: c for c in plan.cells}
    out: set[tuple[str, int]] = set()
    for cell in (by_id[cell_id] for cell_id in skipped if not by_id[cell_id].is_control):
        run = standing[cell.id].latest
        if run is None or not _waits_for_grade(standing[cell.id]):
            continue
        if (block := control_block_needed(store, cell, Layout.from_json(run.layout))) is not None:
            out.add((cell.control_id or "", block))
    return out


def grade_waiting(plan: Plan, store: Store, skipped: list[str], sweep_id: int | None = None) -> None:
    """Grade recorded cells that were `ungraded` (their control had not run) if it has now.

    Grades are appended, so the earlier `ungraded` stays on record.
    """
    by_id = {c.id: c for c in plan.cells}
    waiting = [by_id[cell_id] for cell_id in skipped if not by_id[cell_id].is_control]
    standing = store.standings([c.id for c in waiting] + [c.control_id for c in waiting if c.control_id])
    for cell in waiting:
        mine, control = standing[cell.id], standing.get(cell.control_id or "")
        run, control_run = mine.latest, control.latest if control else None
        if run is None or not _waits_for_grade(mine) or control_run is None or control_run.status != "ok":
            continue
        regrade_run(store, cell, run, plan.spec.grading, sweep_id)


def grade_and_record(store: Store, cell: Cell, run_id: int, outcome: RunOutcome, grading: Grading,
                 sweep_id: int | None = None, engine_block: int | None = None,
                 earlier: list[dict] | None = None) -> Grade:
    """Grade a recorded run (:func:`grade_cell`) and append the grade: the sweep's grades,
    its late ones and `vmatrix results regrade` all come through here."""
    store.record_grade(run_id, grade := grade_cell(store, cell, outcome, grading, sweep_id, engine_block, earlier))
    return grade


def regrade_run(store: Store, cell: Cell, run: Run, grading: Grading, sweep_id: int | None = None) -> Grade:
    """Grade a recorded run again from what the store holds, with the sweep's grader, and
    append the grade."""
    transcript, earlier = store.regrade_read(run.id)
    outcome = RunOutcome(cell.id, run.status, run.started_at, run.finished_at, transcript=transcript,
                         log_path=run.log_path)
    return grade_and_record(store, cell, run.id, outcome, grading, sweep_id, _graded_block(cell, earlier),
                            [row.evidence or {} for row in earlier])
