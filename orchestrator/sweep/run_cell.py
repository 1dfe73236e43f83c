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
same arguments and the same LMCache L2 folder (orchestrator/stack/lmcache.py).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vmatrix.cells import Cell, RunOutcome, model_end_tokens
from vmatrix.errors import BuildError, GateError
from vmatrix.images.gpu_gate import gate_env, hook_id
from vmatrix.images.gpu_gate.vmatrix_gpu_gate import BEGIN, END
from vmatrix.jobs.replay import replay, stalled
from vmatrix.jobs.shapes import LAYOUT_VERSION
from vmatrix.jobs.workload import build_workload, layout_block, requests_digest
from vmatrix.orchestrator.runtimes import runtime_named
from vmatrix.orchestrator.runtimes.affinity import engine_cpus
from vmatrix.orchestrator.runtimes.engine import CELL_ENV, OWNER_ENV, Engine, free_port
from vmatrix.orchestrator.runtimes.gpu_share import GpuGate, does_not_fit, profiling_collision
from vmatrix.orchestrator.runtimes.interface import EngineStart, Runtime
from vmatrix.orchestrator.runtimes.phases import KV_CACHE_READY, LogFollower
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.runtimes.signature import engine_block_tokens, engine_group_blocks
from vmatrix.orchestrator.runtimes.venvs import with_overlay
from vmatrix.orchestrator.spec.matrix_file import Timeouts, memory_share
from vmatrix.orchestrator.spec.workload import WorkloadSpec, workload_spec
from vmatrix.orchestrator.stack import lmcache
from vmatrix.orchestrator.stack.engine_args import MEMORY_FLAG, SERVED_NAME, engine_env, flag_value, gates
from vmatrix.progress import REPLAY, Step, StepReport
from vmatrix.records import FOLLOWS_CELLS, ControlReference, Layout

Report = Callable[[str, str], None]  # (cell_id, phase)

# vLLM picks its internal ports (torch.distributed's TCP store, ZMQ) by binding port 0,
# closing the socket, and binding the number again seconds later; on a host where other
# engines start and installers open connections, that number can be taken in between
# (seen: a control of examples/field-notes.yaml died so, 2026-12-02). The engine then
# exits before serving, which would be recorded as the stack refusing to start.
_PORT_RACE = ("eaddrinuse", "address already in use")


def port_race(signature: str | None) -> bool:
    """True if an engine's startup failure is a port taken from under it (worth one more start)."""
    return signature is not None and any(mark in signature.lower() for mark in _PORT_RACE)


def sidecar_env(cell: Cell, fingerprint: dict[str, Any], owner: str | None) -> dict[str, str]:
    """The LMCache server's environment: the engine's variables and, where the engine runs on a
    staged torch overlay, the overlay first on PYTHONPATH as the engine has it. The server
    loads LMCache's compiled ops too, and on the host's own torch they do not load."""
    env = engine_env(cell.engine, cell.resources.get("cpus", 1), cell.knobs, gates(cell.workload)) | {CELL_ENV: cell.id}
    if owner:
        env[OWNER_ENV] = owner
    return with_overlay(env, fingerprint)


def gpu_ids_for(cell: Cell) -> list[str]:
    """The GPUs Ray gave the cell's task (outside Ray: CUDA_VISIBLE_DEVICES); [] for a cell that asks for none."""
    if not cell.resources.get("gpus"):
        return []
    import ray

    if ray.is_initialized():
        return [str(i) for i in ray.get_gpu_ids()]
    return [i for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i]


def shared_gpu_share(cell: Cell, gpu_ids: list[str]) -> float | None:
    """The memory share of a CUDA engine on a GPU it shares with other cells
    (``resources.gpus`` below 1); None otherwise (a CPU engine uses no GPU memory)."""
    if cell.engine.accelerator != "cuda" or not gpu_ids:
        return None
    return memory_share(float(cell.resources.get("gpus", 0)))


def engine_start(cell: Cell, runtime: Runtime, engine_log: Path, gpu_ids: list[str], run_dir: Path,
                 gate: Sequence[Path] = ()) -> EngineStart:
    """What the runtime needs to start the cell's engine: its environment variables, a
    port, CPUs and GPUs, and on a shared GPU its memory share (and, with ``gate``, the
    GPU gate's files the engine takes itself: images/gpu_gate)."""
    env_vars = engine_env(cell.engine, cell.resources.get("cpus", 1), cell.knobs,
                          gates(cell.workload)) | {CELL_ENV: cell.id}
    if runtime.owner:
        env_vars[OWNER_ENV] = runtime.owner
    if gate:
        env_vars |= gate_env(gate)
    return EngineStart(cell=cell, env=env_vars, port=free_port(),
                       cpus=tuple(engine_cpus(gpu_ids)) if cell.engine.accelerator == "cuda" else (),
                       gpu_ids=gpu_ids, log_path=engine_log, run_dir=run_dir,
                       memory_share=shared_gpu_share(cell, gpu_ids))


@dataclass(frozen=True)
class _Built:
    engine: Engine
    fingerprint: dict[str, Any]
    lmc: lmcache.LMCacheSetup | None
    whole_start_gate: str | None  # on a shared GPU: why the orchestrator holds its gate around the whole start


def _engine(cell: Cell, runtime: Runtime, log_dir: Path, engine_log: Path, gpu_ids: list[str],
            run_dir: Path, progress: StepReport | None, gate: GpuGate | None) -> _Built:
    """The runtime's engine environment (built if needed), an engine for the cell in it
    (not started yet), and the cell's LMCache setup; on a shared GPU, the engine takes
    its ``gate`` itself where it can. Raises BuildError."""
    env = runtime.environment(cell.engine, log_dir, progress)
    whole = runtime.cannot_gate_in_engine(env) if gate is not None else None
    in_engine = gate is not None and whole is None
    engine, lmc = runtime.engine(env, engine_start(cell, runtime, engine_log, gpu_ids, run_dir,
                                                   gate.paths if gate is not None and in_engine else ()))
    fingerprint = dict(env.fingerprint)
    if gate is not None:  # a scheduling shim, not the stack: named so a verdict can be traced to it
        fingerprint["gpu_gate"] = (f"in the engine, {BEGIN} .. {END}: {hook_id()}" if in_engine
                                   else f"the whole start, held by the orchestrator: {whole}")
    return _Built(engine, fingerprint, lmc, whole)


def engine_layout(spec: WorkloadSpec, log_path: Path, block_knob: int | None, follow: int | None = None) -> Layout:
    """The blocks the started engine reports (its log), and what the workload is laid out
    on: ``probe_block_tokens``, else the engine's attention block (its Mamba block in align
    mode), else an explicit ``block_size`` the engine kept without saying, else a guess;
    ``follow``: a control's run on the block a cell's engine chose (FOLLOWS_CELLS)."""
    try:
        log = log_path.read_text(errors="replace")
    except OSError:
        log = ""
    attention = engine_block_tokens(log)
    block, source = (follow, FOLLOWS_CELLS) if follow and spec.shapes else layout_block(spec, attention or block_knob)
    return Layout(block, source, attention, engine_group_blocks(log))


def _count_requests(progress: StepReport | None) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(Step(REPLAY, "requests answered", done, total))


# How long an engine whose log says its start failed (phases.GAVE_UP) has to exit by itself.
GAVE_UP_GRACE_S = 30.0


class _GaveUp(Exception):
    """The engine's log says its start failed, and it has not exited within the grace."""


class StartWatch:
    """What the health wait calls between polls: reports the start phase the engine's log
    shows now (with ``progress``), calls ``on_kv_cache`` once the log says the KV cache is
    allocated (the GPU's gate opens then: runtimes/gpu_share.py), and ends the wait once
    the log says the start failed and the engine has not exited within ``grace_s``."""

    def __init__(self, log_path: Path, progress: StepReport | None, grace_s: float | None = None,
                 on_kv_cache: Callable[[], None] | None = None) -> None:
        self.follower = LogFollower.from_end(log_path)
        self.progress = progress
        self.grace_s = GAVE_UP_GRACE_S if grace_s is None else grace_s
        self.on_kv_cache = on_kv_cache
        self.kv_cache_ready = False
        self._gave_up_at: float | None = None

    def __call__(self) -> None:
        for phase in self.follower.poll():
            if self.progress is not None:
                self.progress(phase)
            if phase.detail == KV_CACHE_READY:
                self.kv_cache_ready = True
                if self.on_kv_cache is not None:
                    self.on_kv_cache()
                    self.on_kv_cache = None
        if self.follower.gave_up is not None:
            self._gave_up_at = self._gave_up_at or time.monotonic()
            if time.monotonic() - self._gave_up_at >= self.grace_s:
                raise _GaveUp(self.follower.gave_up)


def _wait_started(engine: Engine, timeout_s: float, companions: tuple, watch: StartWatch) -> str:
    """The engine's start state: 'exited' too for one that said it failed and lingers."""
    try:
        state = engine.wait_ready(timeout_s, companions, watch)
    except _GaveUp:
        return "exited"
    # The log lines written between the last poll and the health check's answer
    # ("Application startup complete") are read once more: the start's last phase.
    try:
        watch()
    except _GaveUp:
        pass  # ready, or already over: the state says which
    return state


def _does_not_fit(log_path: Path, cell: Cell, share: float) -> str | None:
    """The one line for an engine its share of the GPU could not hold (``gpu_share.does_not_fit``),
    with the share the matrix's own --gpu-memory-utilization set, if it did."""
    try:
        log = log_path.read_text(errors="replace")
    except OSError:
        return None
    try:
        share = float(flag_value(tuple(cell.knobs.get("extra_args") or ()), MEMORY_FLAG) or share)
    except ValueError:
        pass  # vLLM's argument parser said so, and that is the signature
    return does_not_fit(log, float(cell.resources.get("gpus", 0)), share)


def claim_log(log_dir: Path, cell_id: str) -> Path:
    """A new, empty engine log for one run of ``cell_id``, created here so no other run has it.

    Named by the second it starts; runs of one cell that start in the same second (a
    calibrating control's two runs) get -2, -3, ... instead of writing into one file.
    """
    stem = f"{cell_id}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in itertools.count(1):
        path = log_dir / (f"{stem}.log" if n == 1 else f"{stem}-{n}.log")
        try:
            path.open("x").close()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def run_cell(
    cell: Cell, log_dir: Path, timeouts: Timeouts, report: Report | None = None,
    control: ControlReference | None = None, runtime: Runtime | None = None,
    progress: StepReport | None = None, follow_block: int | None = None,
) -> RunOutcome:
    """``control``: the control's tokens, for early abort (grading.abort_after); None: replay all.
    ``follow_block``: a control's run laid out on this block (a cell's engine's), not its own.
    ``progress``: hears the long steps as they go (env or image build, the engine's start
    phases, requests replayed); None (the default) adds no work to any of them."""
    runtime = runtime or runtime_named("local")
    say = (lambda phase: report(cell.id, phase)) if report else (lambda phase: None)
    started = time.time()
    timings: dict[str, float] = {}
    log_dir.mkdir(parents=True, exist_ok=True)
    engine_log = claim_log(log_dir, cell.id)
    stem = engine_log.with_suffix("")  # this run's other files take the log's name
    gpu_ids = gpu_ids_for(cell)
    # On a GPU shared with other cells the engine starts and stops behind the GPU's gate.
    share = shared_gpu_share(cell, gpu_ids)
    gate = GpuGate(gpu_ids) if share is not None else None
    outcome = RunOutcome(cell_id=cell.id, status="ok", started_at=started, finished_at=started,
                         log_path=str(engine_log), node=socket.gethostname(), gpu_ids=gpu_ids)

    def finish(**changes: object) -> RunOutcome:
        for key, value in changes.items():
            setattr(outcome, key, value)
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
        outcome.timings = timings
        return outcome

    say(runtime.building)
    t = time.monotonic()
    try:
        built = _engine(cell, runtime, log_dir, engine_log, gpu_ids, stem, progress, gate)
    except BuildError as exc:
        return finish(status="startup_failed", signature=str(exc), message=str(exc))
    engine, outcome.fingerprint, lmc = built.engine, built.fingerprint, built.lmc
    # The engine takes the gate itself around its memory-critical start; else the
    # orchestrator holds it from spawn to the KV cache (runtimes/gpu_share.py).
    start_gate = gate if built.whole_start_gate is not None else None
    if start_gate is not None:
        say(f"the GPU's gate covers the engine's whole start: {built.whole_start_gate}")
    timings["env_s"] = time.monotonic() - t
    sidecar = None
    if lmc is not None and lmc.sidecar is not None:
        sidecar = EngineProcess(argv=lmc.sidecar.argv, env=sidecar_env(cell, outcome.fingerprint, runtime.owner), log_path=stem.with_name(stem.name + ".lmcache.log"),
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

    def wait_for_gate() -> None:
        say(f"waiting for GPU {','.join(gpu_ids)}: another engine starts or stops there")

    def take_gate(timing: str = "gpu_gate_wait_s") -> None:
        """The gate, for a stop (its memory is freed) or a whole start; not waited for
        while this cell's own engine holds it."""
        assert gate is not None
        timings[timing] = timings.get(timing, 0.0) + gate.acquire(wait_for_gate, engine.owns)

    def stop_engine(timing: str = "gpu_gate_wait_s") -> None:
        if gate is None or gate.held:
            engine.stop()
        else:
            take_gate(timing)
            try:
                engine.stop()
            finally:
                gate.release()

    def watch_start() -> StartWatch:
        """A watch for the start about to begin; a whole-start gate opens on its KV cache."""
        return StartWatch(engine.log_path, progress, on_kv_cache=start_gate.release if start_gate else None)

    def await_start(watch: StartWatch) -> str:
        """Wait for the start; the engine's own wait at the gate is timed apart."""
        try:
            state = _wait_started(engine, timeouts.startup_s, companions, watch)
        finally:
            if start_gate is not None:
                start_gate.release()
            if watch.follower.gate_wait_s is not None:
                timings["gpu_gate_wait_s"] = timings.get("gpu_gate_wait_s", 0.0) + watch.follower.gate_wait_s
        if gate is not None and start_gate is None and watch.kv_cache_ready and watch.follower.gate_wait_s is None:
            # Given the hook, the engine's KV cache came without its "took the GPU gate" line.
            say("the engine did not say it took the GPU's gate: its start was not gated")
            outcome.fingerprint["gpu_gate"] += "; a start's log does not say it took the gate"
        return state

    def start_engine(stop_first: bool = False) -> str:
        """Start the engine (``stop_first``: what is left of a failed start goes first) and
        wait until it serves, or will not; on a shared GPU its memory-critical start
        passes the gate (the engine takes it, or the orchestrator for the whole start)."""
        if stop_first:
            stop_engine()
        if start_gate is not None:
            take_gate()
        watch = watch_start()
        try:
            engine.start()
        except BaseException:
            if start_gate is not None:
                start_gate.release()
            raise
        return await_start(watch)

    def restart_engine() -> str:
        with lock:
            if closed:
                return "exited"
            if start_gate is not None:  # the stop frees memory: behind the gate, held on through the new start
                take_gate()
                engine.stop()
            else:
                stop_engine()
            watch = watch_start()
            engine.start()
        return await_start(watch)

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
        state = start_engine()
        if state == "exited" and port_race(engine.signature()):
            # Not the stack's outcome: the host's. Recorded in the timings, started again once.
            say("a port the engine picked was taken before it bound it; starting it again")
            timings["port_race_restarts"] = 1
            state = start_engine(stop_first=True)
        elif state == "exited" and gate is not None and profiling_collision(engine.signature()):
            # Memory was freed on the GPU while the engine profiled: a process outside the
            # gate (every engine of vmatrix passes it). Also the host's; started again once.
            say("memory was freed on the GPU while the engine profiled it; starting it again")
            timings["profiling_collision_restarts"] = 1
            state = start_engine(stop_first=True)
        # The engine's own start: the wait for the GPU's gate is timed apart.
        timings["startup_s"] = time.monotonic() - t - timings.get("gpu_gate_wait_s", 0.0)
        if state == "companion_exited":
            return finish(status="startup_failed", signature=server_crash(),
                          message=f"the lmcache server died while the engine started ({sidecar.log_path if sidecar else ''})")
        if state == "exited":
            signature = engine.signature() or f"exit code {engine.returncode}"
            if share is not None and (line := _does_not_fit(engine.log_path, cell, share)):
                return finish(status="startup_failed", signature=line, message=signature)
            return finish(status="startup_failed", signature=signature)
        if state == "timeout":
            return finish(status="timeout", message=f"engine not ready after {timeouts.startup_s:.0f} s",
                          signature=engine.signature())

        say("replaying")
        t = time.monotonic()
        spec = workload_spec(cell)
        layout = engine_layout(spec, engine.log_path, cell.knobs.get("block_size"), follow_block)
        workload = build_workload(spec, layout.block_tokens)
        layout = replace(layout, requests_digest=requests_digest(workload) if spec.shapes else None,
                         layout_version=LAYOUT_VERSION)
        if control is not None and control.block_tokens != layout.block_tokens:
            control = None  # its prompts are other prompts: nothing to abort on
        # Restarts are engine starts, each allowed the startup timeout on top of the replay's.
        budget = timeouts.replay_s + timeouts.startup_s * len(workload.restart_after)
        try:
            transcript = asyncio.run(
                asyncio.wait_for(replay(engine.base_url, SERVED_NAME, workload,
                                        on_phase=lambda p: say(f"replaying {p}"), restart=restart, control=control,
                                        end_tokens=model_end_tokens(cell.model.path),
                                        on_request=_count_requests(progress), timeout_s=timeouts.stall_s),
                                 budget)
            )
        except GateError as exc:
            return finish(status="invalid", signature=str(exc),
                          message="the workload gates a phase and this engine cannot hold one")
        except TimeoutError:
            timings["replay_s"] = time.monotonic() - t - timings.get("restart_s", 0.0)
            if sidecar is not None and not sidecar.alive():
                return finish(status="crashed", signature=server_crash(), message="the lmcache server died during the replay")
            return finish(status="timeout", message=f"replay not done after {budget:.0f} s")
        # Replay time without the engine restarts in it (timed as restart_s).
        timings["replay_s"] = time.monotonic() - t - timings.get("restart_s", 0.0)
        transcript.layout = layout
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
            if engine.alive() and all(stalled(r.error) for r in failed):
                # Running, and answering nothing: hung, not crashed (its log says where it was).
                return finish(status="timeout", transcript=transcript,
                              signature=engine.signature() or f"hung: no answer for {timeouts.stall_s:.0f} s",
                              message=f"engine hung: still running, but {len(failed)} request(s) got nothing from it "
                                      f"for {timeouts.stall_s:.0f} s (timeouts.stall_s), first: {failed[0].key}")
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
            # Its memory is freed: not while another engine on the GPU profiles (held
            # already: this cell's restart is starting it, no one else is).
            stop_engine("gpu_gate_stop_wait_s")
        if sidecar is not None:
            sidecar.stop()
        if lmc is not None and lmc.l2_dir is not None:
            # L2 can be gigabytes on a real model; it lived for this cell only.
            shutil.rmtree(lmc.l2_dir, ignore_errors=True)
        # Teardown is part of the cell's time (and of the orchestrator's overhead).
        timings["teardown_s"] = time.monotonic() - t
        outcome.finished_at = time.time()
        timings["total_s"] = outcome.finished_at - started
