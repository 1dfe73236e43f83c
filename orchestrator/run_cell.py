"""Run one cell end to end: environment -> engine -> replay -> outcome.

This is the body of a Ray task. It never raises for anything the stack under test
does (a patch that does not apply, an engine that refuses to start or dies): those
are outcomes to record. The engine is torn down on every path.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from jobs.replay import replay
from jobs.workload import build_workload
from orchestrator.cells import Cell, RunOutcome
from orchestrator.engine_args import SERVED_NAME, engine_argv, engine_env
from orchestrator.runtimes.local import CELL_ENV, EngineProcess, EnvBuildError, ensure_env, free_port
from orchestrator.spec import Timeouts, WorkloadSpec

Report = Callable[[str, str], None]  # (cell_id, phase)


def run_cell(cell: Cell, log_dir: Path, timeouts: Timeouts, report: Report | None = None) -> RunOutcome:
    say = (lambda phase: report(cell.id, phase)) if report else (lambda phase: None)
    started = time.time()
    timings: dict[str, float] = {}
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    engine_log = log_dir / f"{cell.id}-{stamp}.log"
    outcome = RunOutcome(cell_id=cell.id, status="ok", started_at=started, finished_at=started,
                         log_path=str(engine_log), node=socket.gethostname(),
                         gpu_ids=os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if cell.resources.get("gpus") else [])

    def finish(**changes: object) -> RunOutcome:
        for key, value in changes.items():
            setattr(outcome, key, value)
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
        outcome.timings = timings
        return outcome

    say("building env")
    t = time.monotonic()
    try:
        env = ensure_env(cell.engine, log_dir / f"env-{cell.engine.env_id}.log")
    except EnvBuildError as exc:
        return finish(status="startup_failed", signature=str(exc), message=str(exc))
    timings["env_s"] = time.monotonic() - t
    outcome.fingerprint = env.fingerprint

    port = free_port()
    engine = EngineProcess(
        argv=engine_argv(env.python, cell.engine, cell.knobs, cell.model.path, port),
        env=engine_env(cell.engine, cell.resources.get("cpus", 1)) | {CELL_ENV: cell.id},
        log_path=engine_log,
        port=port,
    )
    try:
        say("starting engine")
        t = time.monotonic()
        engine.start()
        state = engine.wait_ready(timeouts.startup_s)
        timings["startup_s"] = time.monotonic() - t
        if state == "exited":
            return finish(status="startup_failed", signature=engine.signature() or f"exit code {engine.proc.returncode}")
        if state == "timeout":
            return finish(status="timeout", message=f"engine not ready after {timeouts.startup_s:.0f} s",
                          signature=engine.signature())

        say("replaying")
        t = time.monotonic()
        workload = build_workload(WorkloadSpec(**cell.workload))
        try:
            transcript = asyncio.run(
                asyncio.wait_for(replay(engine.base_url, SERVED_NAME, workload, on_phase=lambda p: say(f"replaying {p}")),
                                 timeouts.replay_s)
            )
        except TimeoutError:
            timings["replay_s"] = time.monotonic() - t
            return finish(status="timeout", message=f"replay not done after {timeouts.replay_s:.0f} s")
        timings["replay_s"] = time.monotonic() - t
        failed = [r for r in transcript.requests if r.error]
        if failed:
            # Give a dying engine a moment to write its traceback (or to exit).
            deadline = time.monotonic() + 10
            while engine.alive() and engine.signature() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            return finish(status="crashed", transcript=transcript,
                          signature=engine.signature() or failed[0].error,
                          message=f"{len(failed)} request(s) failed, first: {failed[0].key}: {failed[0].error}")
        if not engine.alive():
            return finish(status="crashed", transcript=transcript, signature=engine.signature())
        return finish(status="ok", transcript=transcript)
    finally:
        say("stopping engine")
        t = time.monotonic()
        engine.stop()
        # Teardown is part of the cell's time (and of the orchestrator's overhead).
        timings["teardown_s"] = time.monotonic() - t
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
