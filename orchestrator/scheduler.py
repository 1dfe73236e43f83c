"""Schedule cells as Ray tasks and store each result the moment it arrives.

The driver is the only writer of the results database: tasks return plain
outcomes, and the driver records a run as soon as its task finishes, then grades
every cell whose control run is now known. A cell that fails, or whose task dies,
becomes a recorded outcome; the loop never stops for it.
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

from db.store import Store
from jobs.grade import grade_transcripts
from jobs.records import Transcript
from orchestrator.canary import canary_dir, ensure_canary
from orchestrator.cells import Cell, Grade, RunOutcome
from orchestrator.matrix import Plan
from orchestrator.run_cell import Runtime, run_cell
from orchestrator.runtimes.local import ensure_env, reap_orphans
from orchestrator.spec import Grading, Timeouts

FINAL = ("ok", "startup_failed", "crashed", "timeout")


class SweepError(RuntimeError):
    """The sweep cannot start at all (not: a cell failed)."""


@ray.remote
class _Board:
    """Phase reports from tasks to the driver (tasks cannot touch the driver's UI)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, float]] = []

    def report(self, cell_id: str, phase: str) -> None:
        self.events.append((cell_id, phase, time.time()))

    def drain(self) -> list[tuple[str, str, float]]:
        events, self.events = self.events, []
        return events


ATTEMPT = "attempt on "  # phase prefix: a task (re)started on a node


def _task(cell: Cell, log_dir: str, timeouts: Timeouts, board: ray.actor.ActorHandle, runtime: Runtime) -> RunOutcome:
    # Ray re-runs the task when its node or worker dies; each start is reported, so
    # the driver can record that a cell was retried and where.
    node = ray.get_runtime_context().get_node_id()
    board.report.remote(cell.id, f"{ATTEMPT}{socket.gethostname()} {node}")
    return run_cell(cell, Path(log_dir), timeouts, report=lambda cid, phase: board.report.remote(cid, phase),
                    runtime=runtime)


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


Listener = Callable[[str, str], None]  # (cell_id, phase or final verdict)


def prepare_model(plan: Plan, log_dir: Path) -> None:
    """Build the canary (if the matrix uses one) with the first buildable engine venv."""
    if plan.spec.model.canary is None or (canary_dir(plan.spec.model.canary) / "config.json").is_file():
        return
    errors = []
    # Prefer a stock engine's venv: a patch set may break the builder's imports.
    for cell in sorted(plan.cells, key=lambda c: c.engine.patches is not None):
        try:
            env = ensure_env(cell.engine, log_dir / f"env-{cell.engine.env_id}.log")
        except Exception as exc:  # noqa: BLE001 - try the next recipe, report all at the end
            errors.append(str(exc))
            continue
        ensure_canary(plan.spec.model.canary, env.python, log=log_dir / "canary-build.log")
        return
    raise SweepError(f"cannot build canary '{plan.spec.model.canary}': no engine venv builds ({'; '.join(errors)})")


def grade_cell(store: Store, cell: Cell, outcome: RunOutcome, grading: Grading) -> Grade:
    """Turn a recorded outcome into a verdict, against the control's latest run."""
    if outcome.status != "ok":
        return Grade(outcome.status, outcome.signature or outcome.message or outcome.status)
    if cell.is_control:
        return Grade("control", "reference run for its cells")
    control = store.latest_run(cell.control_id) if cell.control_id else None
    if control is None:
        return Grade("ungraded", "control has not run")
    if control.status != "ok":
        return Grade("ungraded", f"control {control.status}: {control.signature or ''}".strip(), control_run_id=control.id)
    assert outcome.transcript is not None
    control_tx = Transcript(store.requests_for(control.id), store.metrics_for(control.id))
    verdict, summary, evidence = grade_transcripts(
        outcome.transcript, control_tx, grading.tie_margin, grading.max_tie_flip_fraction
    )
    return Grade(verdict, summary, evidence, control.id)  # type: ignore[arg-type]


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
) -> SweepResult:
    """Run the plan's cells that have no final result (all of them with ``rerun``).

    ``runtime`` overrides the matrix's ``runtime:``; ``max_retries``: how often Ray
    re-runs a cell whose worker or node died (not one whose engine failed: that is a
    result).
    """
    say = listener or (lambda cell_id, phase: None)
    result = SweepResult(sweep_id)
    for cell in plan.cells:
        store.add_cell(sweep_id, cell)

    todo: list[Cell] = []
    for cell in plan.cells:
        done = store.latest_run(cell.id)
        if done is not None and done.status in FINAL and not rerun:
            result.skipped.append(cell.id)
            say(cell.id, f"skipped (run {done.id}, {done.status})")
        else:
            todo.append(cell)
    if not todo:
        return result

    t0 = time.monotonic()
    kind = runtime or plan.spec.runtime
    reap_orphans()  # engines left by an orchestrator that was killed
    if kind == "docker":
        from orchestrator.runtimes.docker import reap_containers

        reap_containers()
    prepare_model(plan, log_dir)
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
    rt = Runtime(kind=kind, images=plan.spec.images, sweep=str(sweep_id))  # type: ignore[arg-type]
    attempts: dict[str, list[dict[str, object]]] = {}
    pending = {}
    for cell in todo:
        # A cell asks Ray for its GPUs (a tensor-parallel engine: as many as its TP size);
        # the ids Ray assigns are the ones the engine gets.
        ref = task.options(
            num_cpus=cell.resources.get("cpus", 1), num_gpus=cell.resources.get("gpus", 0),
            max_retries=max_retries, retry_exceptions=False, name=f"cell-{cell.id}",
        ).remote(cell, str(log_dir), plan.spec.timeouts, board, rt)
        pending[ref] = cell
        say(cell.id, "queued")

    by_id = {c.id: c for c in plan.cells}
    ungraded: dict[str, tuple[int, RunOutcome]] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        for cell_id, phase, t_event in ray.get(board.drain.remote()):
            if phase.startswith(ATTEMPT):
                host, _, node = phase.removeprefix(ATTEMPT).partition(" ")
                attempts.setdefault(cell_id, []).append({"host": host, "ray_node": node, "at": t_event})
                n = len(attempts[cell_id])
                phase = f"started on {host} (node {node[:8]})" + (f", retry {n - 1}" if n > 1 else "")
            say(cell_id, phase)
        for ref in ready:
            t_ready = time.monotonic()
            cell = pending.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError as exc:
                # The task itself died (worker killed, node lost, a bug in vmatrix):
                # still a recorded result, labelled so it is not blamed on the stack.
                cause = getattr(exc, "cause", None) or exc
                now = time.time()
                outcome = RunOutcome(cell.id, "crashed", now, now,
                                     signature=f"task failed: {type(cause).__name__}: {cause}".splitlines()[0][:300],
                                     message=str(exc)[:2000])
            outcome.attempts = attempts.get(cell.id, [])
            run_id = store.record_run(sweep_id, outcome)
            result.ran.append(cell.id)
            result.run_ids[cell.id] = run_id
            ungraded[cell.id] = (run_id, outcome)
            # Grade whatever can be graded now: this cell, and cells waiting for this control.
            running = {c.id for c in pending.values()}
            for cid in list(ungraded):
                c = by_id[cid]
                if c.control_id in running and ungraded[cid][1].status == "ok":
                    continue
                rid, out = ungraded.pop(cid)
                grade = grade_cell(store, c, out, plan.spec.grading)
                store.record_grade(rid, grade)
                say(cid, f"graded {grade.verdict}")
            result.driver_s[cell.id] = time.monotonic() - t_ready
    _regrade_waiting(plan, store, result.skipped)
    store.finish_sweep(sweep_id)
    return result


def _regrade_waiting(plan: Plan, store: Store, skipped: list[str]) -> None:
    """Grade recorded cells that were `ungraded` (their control had not run) if it has now.

    Grades are appended, so the earlier `ungraded` stays on record.
    """
    by_id = {c.id: c for c in plan.cells}
    for cell_id in skipped:
        cell = by_id[cell_id]
        run = store.latest_run(cell_id)
        grade = store.latest_grade(run.id) if run else None
        if cell.is_control or run is None or run.status != "ok" or (grade and grade.verdict != "ungraded"):
            continue
        control = store.latest_run(cell.control_id)
        if control is None or control.status != "ok":
            continue
        outcome = RunOutcome(cell_id, "ok", run.started_at, run.finished_at,
                             transcript=Transcript(store.requests_for(run.id), store.metrics_for(run.id)))
        store.record_grade(run.id, grade_cell(store, cell, outcome, plan.spec.grading))
