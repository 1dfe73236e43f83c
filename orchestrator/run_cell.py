"""Run one cell end to end: environment -> engine -> replay -> outcome.

This is the body of a Ray task. It never raises for anything the stack under test
does (a patch that does not apply, an engine that refuses to start or dies): those
are outcomes to record. The engine (and its LMCache server, if the cell has one) is
torn down on every path.

The runtime (``local``: a venv and a process; ``docker``: an image and a container)
only decides how the environment and the engine are obtained; both engines have
start / wait_ready / alive / stop / signature / returncode / base_url.

The cell owns its engine; the replay does not. At a restart point of the workload
the replay calls back here, and the engine is stopped and started again with the
same arguments and the same LMCache L2 folder (orchestrator/lmcache.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jobs.records import ControlReference
from jobs.replay import model_end_tokens, replay
from jobs.workload import build_workload
from orchestrator import lmcache
from orchestrator.cells import Cell, RunOutcome
from orchestrator.engine_args import SERVED_NAME, engine_argv, engine_env
from orchestrator.runtimes.affinity import engine_cpus
from orchestrator.runtimes.local import CELL_ENV, OWNER_ENV, EngineProcess, EnvBuildError, ensure_env, free_port
from orchestrator.spec import ImageOptions, Timeouts, WorkloadSpec

Report = Callable[[str, str], None]  # (cell_id, phase)


@dataclass(frozen=True)
class Runtime:
    kind: Literal["local", "docker"] = "local"
    images: ImageOptions | None = None  # docker: how images are built
    sweep: str = ""  # docker: the sweep id, as a container label
    # host:pid of the sweep's driver: engines and containers carry it, so the next
    # sweep's reaper can tell when their orchestrator was killed.
    owner: str = ""


def _gpu_ids(cell: Cell) -> list[str]:
    if not cell.resources.get("gpus"):
        return []
    import ray

    if ray.is_initialized():
        return [str(i) for i in ray.get_gpu_ids()]
    return [i for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i]


def _hf_cache() -> list[str]:
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    return [home] if os.path.isdir(home) else []


def _engine(cell: Cell, runtime: Runtime, log_dir: Path, engine_log: Path, gpu_ids: list[str],
            run_dir: Path) -> tuple[Any, dict, lmcache.LMCacheSetup | None]:
    """The runtime's environment (built if needed), the cell's LMCache setup, and an
    engine, not started yet.

    Raises EnvBuildError when the environment cannot be built.
    """
    env_vars = engine_env(cell.engine, cell.resources.get("cpus", 1)) | {CELL_ENV: cell.id}
    if runtime.owner:
        env_vars[OWNER_ENV] = runtime.owner
    port = free_port()
    cpus = tuple(engine_cpus(gpu_ids)) if cell.engine.accelerator == "cuda" else ()
    if runtime.kind == "docker":
        if cell.knobs.get("lmcache_connector"):
            raise EnvBuildError("LMCache cells need runtime: local (the LMCache server runs as a local process)")
        import ray

        from orchestrator.canary import is_canary, on_host_path
        from orchestrator.runtimes.docker import (
            CONTAINER_PORT,
            LABEL_CELL,
            LABEL_NODE,
            LABEL_OWNER,
            LABEL_SWEEP,
            EngineContainer,
            ensure_image,
            reap_containers,
            remove_attempts,
        )

        reap_containers()  # containers of a killed attempt of this (or any) cell on this host
        if runtime.sweep and runtime.owner:
            remove_attempts(runtime.sweep, runtime.owner, cell.id)  # a lost node's attempt of this cell
        image = ensure_image(cell.engine, runtime.images, log_dir / f"image-{cell.engine.env_id}.log")
        # The daemon mounts host paths, not this node's.
        model = on_host_path(cell.model.path) if is_canary(cell.model.name) else cell.model.path
        argv = engine_argv(image.python, cell.engine, cell.knobs, model, CONTAINER_PORT, host="0.0.0.0")
        engine = EngineContainer(
            image=image.tag, argv=argv, env=env_vars, log_path=engine_log, port=port, cpus=cpus,
            labels={LABEL_SWEEP: runtime.sweep, LABEL_CELL: cell.id} | ({LABEL_OWNER: runtime.owner} if runtime.owner else {})
            | ({LABEL_NODE: ray.get_runtime_context().get_node_id()} if ray.is_initialized() else {}),
            mounts=[model, *_hf_cache()],
            # CPU engines take no device request, even when Ray hands out logical GPUs.
            gpu_ids=gpu_ids if cell.engine.accelerator == "cuda" else [],
        )
        return engine, image.fingerprint, None
    env = ensure_env(cell.engine, log_dir / f"env-{cell.engine.env_id}.log")
    # The cell's own LMCache state (config, L2) lives in its run folder, nowhere shared.
    lmc = lmcache.prepare(cell.knobs, env.python, run_dir, (free_port(), free_port()))
    argv = engine_argv(env.python, cell.engine, cell.knobs, cell.model.path, port,
                       kv_transfer=lmc.kv_transfer if lmc else None)
    if gpu_ids:
        env_vars["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    engine = EngineProcess(argv=argv, env=env_vars | (lmc.env if lmc else {}), log_path=engine_log, port=port,
                           cpus=cpus)
    return engine, env.fingerprint, lmc


def run_cell(
    cell: Cell, log_dir: Path, timeouts: Timeouts, report: Report | None = None,
    control: ControlReference | None = None, runtime: Runtime | None = None,
) -> RunOutcome:
    """``control``: the control's tokens, for early abort (grading.abort_after); None: replay all."""
    runtime = runtime or Runtime()
    say = (lambda phase: report(cell.id, phase)) if report else (lambda phase: None)
    started = time.time()
    timings: dict[str, float] = {}
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    engine_log = log_dir / f"{cell.id}-{stamp}.log"
    gpu_ids = _gpu_ids(cell)
    outcome = RunOutcome(cell_id=cell.id, status="ok", started_at=started, finished_at=started,
                         log_path=str(engine_log), node=socket.gethostname(), gpu_ids=gpu_ids)

    def finish(**changes: object) -> RunOutcome:
        for key, value in changes.items():
            setattr(outcome, key, value)
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
        outcome.timings = timings
        return outcome

    say("building image" if runtime.kind == "docker" else "building env")
    t = time.monotonic()
    try:
        engine, outcome.fingerprint, lmc = _engine(cell, runtime, log_dir, engine_log, gpu_ids,
                                                   log_dir / f"{cell.id}-{stamp}")
    except EnvBuildError as exc:
        return finish(status="startup_failed", signature=str(exc), message=str(exc))
    timings["env_s"] = time.monotonic() - t
    sidecar = None
    if lmc is not None and lmc.sidecar is not None:
        process_env = engine_env(cell.engine, cell.resources.get("cpus", 1)) | {CELL_ENV: cell.id}
        if runtime.owner:
            process_env[OWNER_ENV] = runtime.owner
        sidecar = EngineProcess(argv=lmc.sidecar.argv, env=process_env, log_path=log_dir / f"{cell.id}-{stamp}.lmcache.log",
                                port=lmc.sidecar.http_port, health_path="/healthcheck")
    companions = (sidecar,) if sidecar else ()

    def server_crash() -> str:
        assert sidecar is not None
        return f"lmcache server: {sidecar.signature() or f'exit code {sidecar.proc.returncode if sidecar.proc else None}'}"

    # A restart runs in a worker thread; teardown must not race it into starting an
    # engine nobody will stop.
    lock = threading.Lock()
    closed = False
    restart_failed: dict[str, str] = {}  # phase -> the restarted engine's state

    def restart_engine() -> str:
        with lock:
            if closed:
                return "exited"
            engine.stop()
            engine.start()
        return engine.wait_ready(timeouts.startup_s, companions)

    async def restart(phase: str) -> bool:
        say(f"restarting engine after {phase}")
        t0 = time.monotonic()
        state = await asyncio.to_thread(restart_engine)
        timings["restart_s"] = timings.get("restart_s", 0.0) + time.monotonic() - t0
        timings["restarts"] = timings.get("restarts", 0) + 1
        if state != "ready":
            restart_failed[phase] = state
        return state == "ready"

    try:
        if sidecar is not None:
            say("starting lmcache server")
            t = time.monotonic()
            sidecar.start()
            state = sidecar.wait_ready(timeouts.startup_s)
            timings["sidecar_s"] = time.monotonic() - t
            if state != "ready":
                status = "timeout" if state == "timeout" else "startup_failed"
                return finish(status=status, signature=server_crash(), message=f"lmcache server {state} ({sidecar.log_path})")

        say("starting engine")
        t = time.monotonic()
        engine.start()
        state = engine.wait_ready(timeouts.startup_s, companions)
        timings["startup_s"] = time.monotonic() - t
        if state == "companion_exited":
            return finish(status="startup_failed", signature=server_crash(),
                          message=f"the lmcache server died while the engine started ({sidecar.log_path if sidecar else ''})")
        if state == "exited":
            return finish(status="startup_failed", signature=engine.signature() or f"exit code {engine.returncode}")
        if state == "timeout":
            return finish(status="timeout", message=f"engine not ready after {timeouts.startup_s:.0f} s",
                          signature=engine.signature())

        say("replaying")
        t = time.monotonic()
        workload = build_workload(WorkloadSpec(**cell.workload))
        # Restarts are engine starts, each allowed the startup timeout on top of the replay's.
        budget = timeouts.replay_s + timeouts.startup_s * len(workload.restart_after)
        try:
            transcript = asyncio.run(
                asyncio.wait_for(replay(engine.base_url, SERVED_NAME, workload,
                                        on_phase=lambda p: say(f"replaying {p}"), restart=restart, control=control,
                                        end_tokens=model_end_tokens(cell.model.path)),
                                 budget)
            )
        except TimeoutError:
            timings["replay_s"] = time.monotonic() - t - timings.get("restart_s", 0.0)
            if sidecar is not None and not sidecar.alive():
                return finish(status="crashed", signature=server_crash(), message="the lmcache server died during the replay")
            return finish(status="timeout", message=f"replay not done after {budget:.0f} s")
        # Replay time without the engine restarts in it (timed as restart_s).
        timings["replay_s"] = time.monotonic() - t - timings.get("restart_s", 0.0)
        if sidecar is not None and not sidecar.alive():
            return finish(status="crashed", transcript=transcript, signature=server_crash(),
                          message="the lmcache server died during the replay")
        for phase, state in restart_failed.items():
            if state == "companion_exited":
                return finish(status="crashed", transcript=transcript, signature=server_crash(),
                              message=f"the lmcache server died while the engine restarted after {phase}")
            return finish(status="timeout" if state == "timeout" else "crashed", transcript=transcript,
                          signature=engine.signature() or f"exit code {engine.returncode}",
                          message=f"engine did not come back ({state}) from the restart after phase {phase}")
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
        if transcript.aborted_early:
            assert control is not None
            return finish(status="ok", transcript=transcript,
                          message=f"aborted early after {control.abort_after} confident divergences from the "
                                  f"control; {len(transcript.skipped)} request(s) not sent")
        return finish(status="ok", transcript=transcript)
    finally:
        say("stopping engine")
        t = time.monotonic()
        with lock:
            closed = True
            engine.stop()
        if sidecar is not None:
            sidecar.stop()
        if lmc is not None and lmc.l2_dir is not None:
            # L2 can be gigabytes on a real model; it lived for this cell only.
            shutil.rmtree(lmc.l2_dir, ignore_errors=True)
        # Teardown is part of the cell's time (and of the orchestrator's overhead).
        timings["teardown_s"] = time.monotonic() - t
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
