"""Schedule cells as Ray tasks and store each result the moment it arrives.

The driver is the only writer of the results database: tasks return plain
outcomes, and the driver records a run as soon as its task finishes, then grades
every cell whose control run is now known. A cell that fails, or whose task dies,
becomes a recorded outcome; the loop never stops for it.

Two grading settings shape the schedule (docs/GRADING.md):

- ``grading.calibrate``: each control runs twice (or once more, if one ok run is
  recorded already); when both are in, the driver measures the noise floor, stores it
  with the sweep, and only then grades the control's cells.
- ``grading.abort_after``: each cell's task gets its control's tokens and margins
  (:class:`ControlReference`) so the replay can stop early. A control that runs in
  this sweep hands them over through a small Ray task that depends on the control's
  task(s), so the cells start only once their control has finished.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from vmatrix.cells import STATUSES, Cell, RunOutcome
from vmatrix.db.store import Store
from vmatrix.errors import SweepError
from vmatrix.jobs.noise import effective_tie_margin, noise_floor
from vmatrix.orchestrator.plan.canary import SHIPPED, CanaryError, canary_dir, draft_ref, ensure_canary
from vmatrix.orchestrator.plan.matrix import Plan
from vmatrix.orchestrator.runtimes import runtime_named
from vmatrix.orchestrator.runtimes.engine import owner_id
from vmatrix.orchestrator.runtimes.interface import Runtime
from vmatrix.orchestrator.runtimes.processes import reap_orphans
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.orchestrator.spec.matrix_file import Timeouts
from vmatrix.orchestrator.spec.workload import Grading
from vmatrix.orchestrator.stack.geometry import violations
from vmatrix.orchestrator.sweep.grading import (
    calibrate,
    control_block_needed,
    end_tokens_for,
    grade_and_record,
    grade_waiting,
    plan_calibration,
    tie_margin_for,
    waiting_blocks,
)
from vmatrix.orchestrator.sweep.run_cell import run_cell
from vmatrix.progress import CANARY, SETUP, Step, StepReport, Throttle
from vmatrix.records import ControlReference, Transcript

# A cell whose newest run has one of these is not run again (without --rerun); a task that
# died (`task_failed`) measured nothing about the stack, so its cell is.
FINAL = tuple(s for s in STATUSES if s != "task_failed")


@ray.remote
class _Board:
    """Phase reports, and with progress on the steps' progress, from tasks to the driver
    (tasks cannot touch the driver's UI; they may run on other nodes).

    Tasks send fire-and-forget calls (thinned at the source, vmatrix.progress.Throttle);
    the driver drains them in its wait loop, every 0.5 s, in the order they came.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str | Step, float]] = []

    def report(self, cell_id: str, phase: str | Step) -> None:
        self.events.append((cell_id, phase, time.time()))

    def drain(self) -> list[tuple[str, str | Step, float]]:
        events, self.events = self.events, []
        return events


ATTEMPT = "attempt on "  # phase prefix: a task (re)started on a node


def _task(
    cell: Cell, log_dir: str, timeouts: Timeouts, board: ray.actor.ActorHandle, runtime: Runtime,
    control: ControlReference | None = None, progress: bool = False, follow_block: int | None = None,
    task_no: int = 0,
) -> RunOutcome:
    # Ray re-runs the task when its node or worker dies; each start is reported, so
    # the driver can record that a run was retried and where. By the task's number: a
    # control runs as several tasks (its noise floor's pair, a run on a cell's block).
    node = ray.get_runtime_context().get_node_id()
    board.report.remote(cell.id, f"{ATTEMPT}{task_no} {socket.gethostname()} {node}")
    steps = Throttle(lambda step: board.report.remote(cell.id, step)) if progress else None
    return run_cell(cell, Path(log_dir), timeouts, report=lambda cid, phase: board.report.remote(cid, phase),
                    control=control, runtime=runtime, progress=steps, follow_block=follow_block)


def task_options(cell: Cell, max_retries: int) -> dict[str, object]:
    """The Ray options of a cell's task. A cell asks Ray for its GPUs (a tensor-parallel
    engine: as many as its TP size; a fraction below 1: a share of one GPU, which Ray gives
    to as many such cells at once as fit); the ids Ray assigns are the ones the engine gets."""
    return {"num_cpus": cell.resources.get("cpus", 1), "num_gpus": cell.resources.get("gpus", 0),
            "max_retries": max_retries, "retry_exceptions": False, "name": f"cell-{cell.id}"}


def control_reference(
    runs: list[tuple[float, Transcript]], tie_margin: float, abort_after: int, end_tokens: frozenset[int] = frozenset()
) -> ControlReference | None:
    """The early-abort reference from a control's ok runs ((finished_at, transcript)).

    The newest run is the one cells are graded against (``Store.latest_run``); with a
    second one (calibration) the tie margin is raised to the noise floor, as the grader
    will, so the replay does not count as confident what the grade will call a tie.
    """
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: r[0], reverse=True)
    latest = ordered[0][1]
    if len(ordered) > 1:
        try:
            tie_margin = effective_tie_margin(tie_margin, noise_floor(ordered[1][1], latest, end_tokens))
        except ValueError:
            pass  # a repeat with failed requests measures nothing; keep the configured margin
    return ControlReference.from_transcript(latest, tie_margin, abort_after, end_tokens)


def _reference_task(
    refs: list[ray.ObjectRef], stored: list[tuple[float, Transcript]], tie_margin: float, abort_after: int,
    end_tokens: frozenset[int] = frozenset(),
) -> ControlReference | None:
    # The refs come in a list so Ray does not resolve them first: a control task that
    # died must give its cells no reference (they replay in full), not fail them.
    runs = list(stored)
    for ref in refs:
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayError:
            continue
        if outcome.status == "ok" and outcome.transcript is not None:
            runs.append((outcome.finished_at, outcome.transcript))
    return control_reference(runs, tie_margin, abort_after, end_tokens)


def _start_local_ray(num_gpus: int | None, tries: int = 3) -> None:
    """A private Ray on this host; tried again when a loaded host makes the raylet late.

    A raylet aborts when its dashboard agent has not written its port within
    ``raylet_start_wait_time_s`` / ``agent_register_timeout_ms`` ("Timed out waiting
    for file .../metrics_agent_port_..."), and ray.init gives up on a raylet that has
    not registered within 30 s; on a busy 2-core host both happen now and then.
    """
    os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    for attempt in range(tries):
        try:
            # "local": a fresh cluster, never one that a `ray start` on this host left in
            # /tmp/ray/ray_current_cluster (which a bare ray.init() would join).
            ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=num_gpus, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
            return
        except Exception as exc:  # Ray raises a bare Exception for a node that did not come up
            ray.shutdown()
            if "timed out during startup" not in str(exc) or attempt == tries - 1:
                raise SweepError(f"cannot start a local Ray: {exc}") from exc


@dataclass
class SweepResult:
    sweep_id: int
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    run_ids: dict[str, int] = field(default_factory=dict)
    setup_s: float = 0.0  # canary check/build and Ray start, once per sweep
    driver_s: dict[str, float] = field(default_factory=dict)  # per cell: store + grade
    repeats: dict[str, int] = field(default_factory=dict)  # control -> run id of its noise-floor repeat
    # control -> run ids of its runs laid out on a block its cells' engines chose
    follow_ups: dict[str, list[int]] = field(default_factory=dict)
    task_failed: list[str] = field(default_factory=list)  # cells whose task died: the next sweep runs them


Listener = Callable[[str, str], None]  # (cell_id, phase or final verdict)
# (cell_id, step) as a long step goes; cell_id "" for the sweep's own setup (the canary).
ProgressListener = Callable[[str, Step], None]


def canary_step(record: dict) -> Step:
    """A canary builder's progress record (images/canary/build_canary.py) as a step."""
    what = str(record.get("what", "train"))
    loss = f", loss {record['loss']:.3f}" if isinstance(record.get("loss"), (int, float)) else ""
    steps = record.get("steps")
    return Step(CANARY, f"{what}{loss}", int(record.get("step", 0)), int(steps) if steps else None)


def prepare_model(plan: Plan, log_dir: Path, progress: StepReport | None = None) -> None:
    """Build the canary (if the matrix uses one) with the first buildable engine venv;
    check that the canary drafters the cells name are here (shipped: trained ones are
    never trained behind the user's back)."""
    drafters = {draft_ref((c.knobs.get("speculative") or {}).get("model")) for c in plan.cells} - {None}
    for name in sorted(n for n in drafters if n is not None):
        if not (canary_dir(name) / "config.json").is_file():
            raise SweepError(f"canary drafter '{name}': no shipped checkpoint made by this recipe "
                             f"({SHIPPED / name} is missing, or its builder or recipe changed); rebuild it with "
                             f"`vmatrix canary build {name} --train` (images/canary/README.md)")
    if plan.spec.model.canary is None or (canary_dir(plan.spec.model.canary) / "config.json").is_file():
        return
    errors = []
    # Prefer a stock engine's venv: a patch set may break the builder's imports.
    for cell in sorted(plan.cells, key=lambda c: c.engine.patches is not None):
        try:
            env = ensure_env(cell.engine, log_dir / f"env-{cell.engine.env_id}.log", progress)
        except Exception as exc:  # noqa: BLE001 - try the next recipe, report all at the end
            errors.append(str(exc))
            continue
        try:
            ensure_canary(plan.spec.model.canary, env.python, log=log_dir / "canary-build.log",
                          progress=(lambda record: progress(canary_step(record))) if progress else None)
        except CanaryError as exc:
            raise SweepError(str(exc)) from exc
        return
    raise SweepError(f"cannot build canary '{plan.spec.model.canary}': no engine venv builds ({'; '.join(errors)})")


def run_sweep(
    plan: Plan,
    store: Store,
    sweep_id: int,
    log_dir: Path,
    *,
    rerun: bool = False,
    address: str | None = None,
    num_gpus: int | None = None,
    listener: Listener | None = None,
    runtime: str | None = None,
    max_retries: int = 1,
    progress: ProgressListener | None = None,
) -> SweepResult:
    """Run the plan's cells that have no final result (all of them with ``rerun``).

    ``runtime`` overrides the matrix's ``runtime:``; ``max_retries``: how often Ray
    re-runs a cell whose worker or node died (not one whose engine failed: that is a
    result). ``progress`` hears the long steps of the setup and of each cell (env or image
    build, canary build, engine start phases, requests replayed); None: the tasks
    report no steps, and do none of the work of watching them.
    """
    say = listener or (lambda cell_id, phase: None)
    result = SweepResult(sweep_id)
    for cell in plan.cells:
        store.add_cell(sweep_id, cell)

    run_invalid = plan.spec.run_invalid
    grading = plan.spec.grading
    # Where every cell stands, read once: which are done, and which controls calibrate.
    standing = store.standings([c.id for c in plan.cells], sweep_id)
    todo: list[Cell] = []
    for cell in plan.cells:
        done = standing[cell.id].latest
        # An `invalid` record says "not started"; asked to run invalid cells, run it now.
        if done is not None and done.status in FINAL and not rerun and not (run_invalid and done.status == "invalid"):
            result.skipped.append(cell.id)
            say(cell.id, f"skipped (run {done.id}, {done.status})")
        elif (broken := violations(cell.engine, cell.knobs)) and not run_invalid:
            # Recorded at once, without an engine start (or a Ray task).
            now = time.time()
            outcome = RunOutcome(cell.id, "invalid", now, now, signature=str(broken[0]),
                                 message="; ".join(map(str, broken)) + " (run_invalid: true runs it anyway)")
            run_id = store.record_run(sweep_id, outcome)
            grade_and_record(store, cell, run_id, outcome, grading)
            result.ran.append(cell.id)
            result.run_ids[cell.id] = run_id
            say(cell.id, "graded invalid")
        else:
            todo.append(cell)
    # Calibration: tasks per control so that it has two ok runs; controls listed in
    # `calibrating` get their noise floor measured once their tasks are done.
    calibration = plan_calibration(store, plan, standing, {c.id for c in todo}, sweep_id)
    runs_of, calibrating = calibration.runs_of, calibration.calibrating
    todo[:0] = reversed(calibration.again)
    # Recorded cells that wait for a control laid out on their engine's block get one now.
    waiting = waiting_blocks(plan, store, standing, result.skipped)
    if not todo and not waiting:
        return result

    t0 = time.monotonic()
    rt = runtime_named(runtime or plan.spec.runtime, images=plan.spec.images, sweep=str(sweep_id), owner=owner_id())
    reap_orphans()  # engines left by an orchestrator that was killed
    rt.reap()  # and the runtime's own (containers)
    prepare_model(plan, log_dir, Throttle(lambda step: progress(SETUP, step)) if progress else None)
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            _start_local_ray(num_gpus)
    result.setup_s = time.monotonic() - t0
    # The board lives on the driver's node: a lost worker node must not take it along.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    board = _Board.options(scheduling_strategy=here).remote()
    task = ray.remote(_task)
    attempts: dict[str, list[dict[str, object]]] = {}  # per cell, every task's: lost engines are found by these
    task_attempts: dict[int, list[dict[str, object]]] = {}  # per task: what its run records
    pending: dict[ray.ObjectRef, Cell] = {}
    task_of: dict[ray.ObjectRef, int] = {}
    control_refs: dict[str, list[ray.ObjectRef]] = {}

    def launch(cell: Cell, control: object = None, follow_block: int | None = None) -> ray.ObjectRef:
        number = len(task_of)
        ref = task.options(**task_options(cell, max_retries)).remote(
            cell, str(log_dir), plan.spec.timeouts, board, rt, control, progress is not None, follow_block, number)
        pending[ref] = cell
        task_of[ref] = number
        return ref

    # A control laid out on a block one of its cells' engines chose (FOLLOWS_CELLS): once per
    # (control, block) in a sweep; its run is graded as a control, the cell against it.
    followed: set[tuple[str, int]] = set()
    follow_refs: set[ray.ObjectRef] = set()

    def follow(control_id: str, block: int, for_cell: str) -> None:
        followed.add((control_id, block))
        follow_refs.add(launch(by_id[control_id], follow_block=block))
        say(control_id, f"queued (laid out on {block}-token blocks, the block {for_cell}'s engine chose)")

    by_id = {c.id: c for c in plan.cells}
    for control_id, block in sorted(waiting):
        follow(control_id, block, "a recorded cell")

    for cell in todo:
        if cell.is_control:
            control_refs[cell.id] = [launch(cell) for _ in range(runs_of.get(cell.id, 1))]
            say(cell.id, "queued" + (" (noise floor repeat)" if cell.id in calibrating else ""))

    references: dict[str, object] = {}
    for cell in todo:
        if cell.is_control:
            continue
        control = None
        if grading.abort_after and cell.control_id:
            if cell.control_id not in references:
                references[cell.control_id] = reference_for(store, cell.control_id, control_refs, grading,
                                                              tie_margin_for(grading, cell.model.name, cell.model.path),
                                                              end_tokens_for(cell))
            control = references[cell.control_id]
        launch(cell, control)
        say(cell.id, "queued" + (" (waits for its control: early abort)" if isinstance(control, ray.ObjectRef) else ""))

    ungraded: dict[str, tuple[int, RunOutcome]] = {}
    next_node_check, cleared = time.monotonic() + 5, set[tuple[str, str]]()
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        if time.monotonic() > next_node_check:
            next_node_check = time.monotonic() + 5
            _remove_lost_engines(rt, attempts, {c.id for c in pending.values()}, cleared, say)
        for cell_id, phase, t_event in ray.get(board.drain.remote()):
            if isinstance(phase, Step):
                if progress is not None:
                    progress(cell_id, phase)
                continue
            if phase.startswith(ATTEMPT):
                task_no, host, node = phase.removeprefix(ATTEMPT).split(" ", 2)
                entry = {"host": host, "ray_node": node, "at": t_event}
                attempts.setdefault(cell_id, []).append(entry)
                task_attempts.setdefault(int(task_no), []).append(entry)
                n = len(task_attempts[int(task_no)])
                phase = f"started on {host} (node {node[:8]})" + (f", retry {n - 1}" if n > 1 else "")
            say(cell_id, phase)
        for ref in ready:
            t_ready = time.monotonic()
            cell = pending.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError as exc:
                # The task itself died (worker killed, node lost past max_retries, vmatrix not
                # importable on the worker, a bug in vmatrix): still recorded, under a status
                # of its own so the table never shows it as the engine's crash.
                cause = getattr(exc, "cause", None) or exc
                now = time.time()
                outcome = RunOutcome(cell.id, "task_failed", now, now,
                                     signature=f"task failed: {type(cause).__name__}: {cause}".splitlines()[0][:300],
                                     message=str(exc)[:2000])
            if broken := violations(cell.engine, cell.knobs):
                # Run anyway (run_invalid): the engine's own answer, with the rule it broke.
                note = "ran despite " + "; ".join(map(str, broken))
                outcome.message = f"{note}; {outcome.message}" if outcome.message else note
            outcome.attempts = task_attempts.get(task_of[ref], [])
            run_id = store.record_run(sweep_id, outcome)
            if outcome.status == "task_failed":
                result.task_failed.append(cell.id)
            if ref in follow_refs:
                result.follow_ups.setdefault(cell.id, []).append(run_id)
            elif cell.id in result.run_ids or cell.id in result.skipped:
                result.repeats[cell.id] = run_id
            else:
                result.ran.append(cell.id)
                result.run_ids[cell.id] = run_id
            ungraded[f"{cell.id}#{run_id}"] = (run_id, outcome)
            running = {c.id for c in pending.values()}
            if cell.id in calibrating and cell.id not in running:
                calibrating.discard(cell.id)  # once: a run on a cell's block comes later
                floor = calibrate(store, sweep_id, cell)
                say(cell.id, f"noise floor: {floor.flips}/{floor.requests} requests differ, max drift "
                             f"{floor.max_drift:.3f}" if floor else "noise floor: not measured (a control run failed)")
            # Grade whatever can be graded now: this cell, and cells waiting for this control.
            for key in list(ungraded):
                c = by_id[key.split("#")[0]]
                if c.control_id in running and ungraded[key][1].status == "ok":
                    continue
                rid, out = ungraded[key]
                if out.status == "ok" and c.control_id in by_id and (block := control_block_needed(
                        store, c, out.transcript.layout if out.transcript else None)) is not None \
                        and (c.control_id, block) not in followed:
                    follow(c.control_id, block, c.id)
                    running.add(c.control_id)
                    say(c.id, f"waits for its control laid out on {block}-token blocks")
                    continue
                del ungraded[key]
                grade = grade_and_record(store, c, rid, out, grading, sweep_id)
                say(c.id, f"graded {grade.verdict}")
            result.driver_s[cell.id] = time.monotonic() - t_ready
    grade_waiting(plan, store, result.skipped, sweep_id)
    # Every task has ended, so an engine still labelled with this sweep is a lost node's.
    for cell_id, name in rt.remove_lost_attempts():
        say(cell_id, f"removed {name}: the engine of an attempt whose node was lost")
    store.finish_sweep(sweep_id)
    return result


def _remove_lost_engines(rt: Runtime, attempts: dict[str, list[dict[str, object]]], running: set[str],
                         cleared: set[tuple[str, str]], say: Listener) -> None:
    # A lost node's engine would otherwise hold its cores until the cell's retry starts,
    # which may wait for another cell to finish: remove it as soon as Ray calls the node dead.
    dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
    for cell_id in running:
        for attempt in attempts.get(cell_id, []):
            # By the attempt's node, not the cell: the cell's retry may have started already.
            node = str(attempt["ray_node"])
            if node in dead and (cell_id, node) not in cleared:
                cleared.add((cell_id, node))  # once per lost attempt
                for _, name in rt.remove_lost_attempts(cell_id, node=node):
                    say(cell_id, f"removed {name}: its node was lost")


def reference_for(
    store: Store, control_id: str, control_refs: dict[str, list[ray.ObjectRef]], grading: Grading, tie_margin: float,
    end_tokens: frozenset[int] = frozenset(),
) -> ControlReference | ray.ObjectRef | None:
    """What a cell's task gets for early abort: a value from the store, or a Ray reference
    to one that resolves when the control's task(s) of this sweep finish. ``tie_margin``:
    the grader's before the noise floor (:func:`tie_margin_for`), so the replay does not
    count as confident what the grade will call a tie."""
    assert grading.abort_after is not None
    stored = [(run.finished_at, t) for run, t in store.ok_transcripts(control_id, 2 if grading.calibrate else 1)]
    if control_id not in control_refs:
        return control_reference(stored, tie_margin, grading.abort_after, end_tokens)
    # Runs of this sweep are newer than any stored one; a stored ok run still counts as
    # the repeat when only one new run was scheduled.
    keep = stored[:1] if len(control_refs[control_id]) == 1 and grading.calibrate else []
    return ray.remote(_reference_task).options(num_cpus=0, max_retries=0).remote(
        control_refs[control_id], keep, tie_margin, grading.abort_after, end_tokens
    )


