"""Several engines on one GPU (orchestrator/runtimes/gpu_share.py): the memory share a
fraction gives each engine, Ray placing two half-GPU cells on one (logical) GPU, the
gate that lets one engine at a time through its memory profiling, and the one line for
a cell that does not fit.

No GPU and no vLLM here. Placement is shown through a real local Ray with one logical
GPU and the scheduler's own task options; what each cell's engine would be started with
comes from run_cell's and the local runtime's real code, without starting it. The gate
tests run real processes (``processes.EngineProcess``) that print the lines vLLM prints, as
its source has them, and exit: the engine here is a short script, never a server.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.test_gpu_gate import ENGINE, fake_vllm
from vmatrix.cells import Cell, ModelRef
from vmatrix.errors import SpecError
from vmatrix.images.gpu_gate import FOLDER
from vmatrix.images.gpu_gate.vmatrix_gpu_gate import ENV
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.runtimes.gpu_share import GpuGate, does_not_fit, flock_holders, profiling_collision
from vmatrix.orchestrator.runtimes.interface import EngineStart
from vmatrix.orchestrator.runtimes.local import LocalRuntime
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.spec.matrix_file import Resources, Timeouts, parse_spec
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.orchestrator.sweep.run_cell import engine_start, gpu_ids_for, run_cell
from vmatrix.orchestrator.sweep.scheduler import _start_local_ray, task_options
from vmatrix.recipe import EngineRecipe

MATRIX = """\
name: packed
engines: [{{vllm: "0.26.0", accelerator: cuda}}]
model: {{canary: tiny-qwen3next}}
axes:
  prefix_caching: [false, true]
  extra_args: [{extra_args}]
workloads: [{{name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}}]
resources: {{gpus: {gpus}, cpus: 1}}
"""


def _plan(gpus: float = 0.5, extra_args: str = "[]") -> list[Cell]:
    return expand(parse_spec(MATRIX.format(gpus=gpus, extra_args=extra_args))).cells


# --- the memory share ---------------------------------------------------------------


def test_a_fraction_of_a_gpu_is_a_memory_share_less_the_engines_own_headroom() -> None:
    assert Resources(gpus=0.5).memory_share == 0.47
    assert Resources(gpus=0.25).memory_share == 0.22
    assert Resources(gpus=1).memory_share is None and Resources(gpus=2).memory_share is None
    assert Resources().memory_share is None  # no GPU at all


@pytest.mark.parametrize(("gpus", "says"), [
    (1.5, "resources.gpus: 1.5: more than one GPU must be a whole number"),
    (0.04, "resources.gpus: 0.04 of a GPU leaves no memory share"),
])
def test_a_fraction_ray_cannot_place_or_that_leaves_no_memory_is_refused(gpus: float, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        parse_spec(MATRIX.format(gpus=gpus, extra_args="[]"))


def test_the_share_goes_into_the_argv_unless_the_matrix_sets_its_own() -> None:
    recipe = EngineRecipe(vllm="0.26.0", accelerator="cuda")
    knobs = _plan()[0].knobs
    argv = engine_argv(Path("python"), recipe, knobs, "/m", 8000, memory_share=0.47)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.47"
    assert "--gpu-memory-utilization" not in engine_argv(Path("python"), recipe, knobs, "/m", 8000)
    own = knobs | {"extra_args": ["--gpu-memory-utilization=0.2"]}
    argv = engine_argv(Path("python"), recipe, own, "/m", 8000, memory_share=0.47)
    assert [a for a in argv if a.startswith("--gpu-memory-utilization")] == ["--gpu-memory-utilization=0.2"]


def test_a_matrix_share_above_the_fraction_is_refused_at_plan_time() -> None:
    with pytest.raises(SpecError, match=r"extra_args: --gpu-memory-utilization 0.3 is more than the memory share "
                                        r"of resources.gpus 0.25 \(0.22"):
        _plan(0.25, '["--gpu-memory-utilization", "0.3"]')
    assert {c.resources["gpus"] for c in _plan(0.5, '["--gpu-memory-utilization", "0.3"]')} == {0.5}


def test_gpu_fraction_env_packs_canary_cells_that_ask_for_a_whole_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_GPU_FRACTION", "0.25")
    assert {c.resources["gpus"] for c in _plan(1)} == {0.25}
    # Grown to fit the matrix's own share (the GPU matrices of docs/GPU.md set 0.3): 3 a GPU.
    assert {c.resources["gpus"] for c in _plan(1, '["--gpu-memory-utilization", "0.3"]')} == {0.33}
    assert {c.resources["gpus"] for c in _plan(2)} == {2}  # tensor parallel: left alone
    cpu = MATRIX.format(gpus=1, extra_args="[]").replace("accelerator: cuda", "accelerator: cpu")
    assert {c.resources["gpus"] for c in expand(parse_spec(cpu)).cells} == {1}  # logical GPUs: accounting only
    monkeypatch.setenv("VMATRIX_GPU_FRACTION", "")
    assert {c.resources["gpus"] for c in _plan(1)} == {1}
    for bad, says in (("half", "'half' is not a number"), ("1.5", "at most 1"), ("0.01", "leaves no memory share")):
        monkeypatch.setenv("VMATRIX_GPU_FRACTION", bad)
        with pytest.raises(SpecError, match=f"VMATRIX_GPU_FRACTION: .*{says}"):
            _plan(1)


# --- placement: a real local Ray with one logical GPU ----------------------------------


@dataclass
class _Env:
    """A built engine environment, as the runtime is handed one (nothing is built here)."""

    python: Path = Path("/venv/bin/python")
    fingerprint: dict[str, Any] = field(default_factory=dict)
    built: bool = False


# Ray's workers do not have tests/ on their path: this module's functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ray.remote(num_cpus=0)
class _Arrivals:
    def __init__(self) -> None:
        self.count = 0

    def arrive(self) -> int:
        self.count += 1
        return self.count

    def seen(self) -> int:
        return self.count


def _engine_of(cell: Cell, arrivals: Any, log_dir: str) -> dict[str, Any]:
    """A cell's task, as far as the engine's start: the GPUs Ray gave it and the argv and
    environment the local runtime would start its engine with."""
    ray.get(arrivals.arrive.remote())
    deadline = time.monotonic() + 120
    while ray.get(arrivals.seen.remote()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # both tasks at once, or the GPU was not shared but queued
    together = ray.get(arrivals.seen.remote()) == 2
    gpu_ids = gpu_ids_for(cell)
    start = engine_start(cell, LocalRuntime(), Path(log_dir) / f"{cell.id}.log", gpu_ids, Path(log_dir))
    engine, _ = LocalRuntime().engine(_Env(), start)
    return {"together": together, "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()], "argv": engine.argv,
            "env": engine.env, "worker_cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}


@pytest.fixture
def one_logical_gpu(monkeypatch: pytest.MonkeyPatch):
    ray.shutdown()
    # A cluster of its own, which no bare ray.init() elsewhere on the machine joins.
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="vmg-"))
    _start_local_ray(num_gpus=1)  # the sweep's own local Ray
    yield
    ray.shutdown()


def test_two_half_gpu_cells_run_at_once_on_one_gpu_each_with_its_share(one_logical_gpu, tmp_path: Path) -> None:
    cells = _plan(0.5)
    assert len(cells) == 2 and all(c.resources["gpus"] == 0.5 for c in cells)
    arrivals = _Arrivals.remote()
    task = ray.remote(_engine_of)
    results = ray.get([task.options(**task_options(c, max_retries=0)).remote(c, arrivals, str(tmp_path))
                       for c in cells], timeout=300)
    assert all(r["together"] for r in results), "the two half-GPU cells did not run at the same time"
    assert [r["ray_gpu_ids"] for r in results] == [["0"], ["0"]]
    for r in results:
        assert r["worker_cvd"] == "0" and r["env"]["CUDA_VISIBLE_DEVICES"] == "0"
        assert r["argv"][r["argv"].index("--gpu-memory-utilization") + 1] == "0.47"


# --- the gate -------------------------------------------------------------------------


def test_the_gate_lets_one_engine_through_per_gpu(tmp_path: Path) -> None:
    first, second, other = GpuGate(["0"], tmp_path), GpuGate(["0"], tmp_path), GpuGate(["1"], tmp_path)
    assert first.acquire() < 1
    told: list[str] = []
    waited: list[float] = []

    def engine_elsewhere() -> None:  # another cell's task (a thread here, a Ray worker in a sweep)
        waited.append(other.acquire())  # another GPU: its own gate, open
        other.release()
        waited.append(second.acquire(lambda: told.append("waiting")))
        second.release()

    thread = threading.Thread(target=engine_elsewhere)
    thread.start()
    time.sleep(1.0)
    first.release()
    thread.join(10)
    assert waited[0] < 0.5 and waited[1] >= 0.5 and told == ["waiting"]


# Counts its starts; each start appends "<event> <cell> <time>" lines to EVENTS as it goes:
# spawn, then the line vLLM logs once its KV cache is allocated (vllm/v1/engine/core.py),
# then a wait, then its end line, and it exits with the start's LINE (vLLM's error).
SCRIPT = """
import sys, time, pathlib
events, cell, count, hold, line = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
def note(what):
    with events.open("a") as fh:
        fh.write(f"{what} {cell} {time.time()}\\n")
note("spawn")
time.sleep(0.3)
if line[min(n, len(line)) - 1].startswith("KV-OK"):
    note("kv")  # before the line: the gate opens on the line, so causally after this
    # Split: the runtime echoes this script into the log as the engine's argv, and the
    # whole line there would open the gate at the spawn.
    print("(EngineCore pid=1) INFO 12-02 00:25:56 [core.py:402] init engine (profile, create kv cache, warmup model)", "took 0.56 s", flush=True)
time.sleep(hold)
note("exit")
print("Traceback (most recent call last):", file=sys.stderr)
print(line[min(n, len(line)) - 1].removeprefix("KV-OK "), file=sys.stderr)
sys.exit(1)
"""


@dataclass
class ScriptRuntime:
    """A runtime whose engine is SCRIPT: the cell's path through run_cell, with no vLLM."""

    events: Path
    lines: list[str]
    hold_s: float = 1.5
    starts: list[EngineStart] = field(default_factory=list)
    name: str = "script"
    building: str = "no environment to build"
    owner: str = ""

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: object = None) -> _Env:
        return _Env()

    def cannot_gate_in_engine(self, env: _Env) -> str | None:
        return "a scripted engine has no vLLM worker"  # the orchestrator holds the gate for the whole start

    def engine(self, env: _Env, start: EngineStart) -> tuple[EngineProcess, None]:
        self.starts.append(start)
        count = self.events.parent / f"starts-{start.cell.id}"
        argv = [sys.executable, "-c", SCRIPT, str(self.events), start.cell.id, str(count), str(self.hold_s), *self.lines]
        return EngineProcess(argv=argv, env={}, log_path=start.log_path, port=start.port), None

    def reap(self) -> list[str]:
        return []

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        return []


def _cell(name: str, gpus: float = 0.5) -> Cell:
    engine = EngineRecipe(vllm="0.26.0", accelerator="cuda")
    model = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny")
    knobs = {"extra_args": [name]}
    return Cell(Cell.make_id(engine, knobs, model.digest, "w1"), engine, knobs, model, {}, "w1", None,
                {"gpus": gpus, "cpus": 1})


@pytest.fixture
def gpu0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Outside Ray, a cell's GPUs are CUDA_VISIBLE_DEVICES; the gates live in this test's cache."""
    ray.shutdown()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _events(path: Path) -> list[tuple[str, str, float]]:
    return [(w, c, float(t)) for w, c, t in (line.split() for line in path.read_text().splitlines())]


def test_engines_sharing_a_gpu_start_one_at_a_time_until_their_kv_cache_is_allocated(gpu0: Path) -> None:
    events = gpu0 / "events"
    # The first engine runs on 6 s after its KV line: time enough, on a loaded machine, for
    # the second to be spawned while it runs.
    runtime = ScriptRuntime(events, ["KV-OK ValueError: the stack's own refusal"], hold_s=6)
    cells = [_cell("a"), _cell("b")]
    outcomes: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda c=c: outcomes.__setitem__(c.id, run_cell(
        c, gpu0 / "logs", Timeouts(startup_s=60, replay_s=30), runtime=runtime))) for c in cells]  # type: ignore[arg-type]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    seen = _events(events)
    order = [(w, c) for w, c, _ in seen]
    first, second = order[0][1], next(c for _, c in order if c != order[0][1])
    at = {(w, c): t for w, c, t in seen}
    # The second engine is spawned only once the first has said its KV cache is there ...
    assert at[("spawn", second)] >= at[("kv", first)]
    # ... and not later than needed: while the first is still running.
    assert at[("spawn", second)] < at[("exit", first)]
    assert all(s.memory_share == 0.47 and s.gpu_ids == ["0"] for s in runtime.starts)
    for cell in cells:
        out = outcomes[cell.id]
        assert out.status == "startup_failed" and out.signature == "ValueError: the stack's own refusal"
        assert out.timings["startup_s"] > 0
    assert outcomes[second].timings["gpu_gate_wait_s"] >= 0.2  # it waited, and the wait is timed apart
    assert outcomes[first].fingerprint["gpu_gate"] == \
        "the whole start, held by the orchestrator: a scripted engine has no vLLM worker"
    assert all(ENV not in s.env for s in runtime.starts)  # the engine was not given the gate's files


@dataclass
class GatedRuntime:
    """A runtime whose engine takes the gate itself: tests/test_gpu_gate.py's scripted
    engine (a fake vLLM worker under the real hook), started by run_cell's own path."""

    folder: Path
    fake: dict[str, str]
    starts: list[EngineStart] = field(default_factory=list)
    name: str = "gated"
    building: str = "no environment to build"
    owner: str = ""

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: object = None) -> _Env:
        return _Env()

    def cannot_gate_in_engine(self, env: _Env) -> str | None:
        return None

    def engine(self, env: _Env, start: EngineStart) -> tuple[EngineProcess, None]:
        self.starts.append(start)
        fake = {"FAKE_TREE": str(fake_vllm(self.folder / "fake")), "FAKE_EVENTS": str(self.folder / "events"),
                "FAKE_NAME": start.cell.id} | self.fake
        return EngineProcess(argv=[sys.executable, "-c", ENGINE], env=start.env | fake, log_path=start.log_path,
                             port=start.port), None

    def reap(self) -> list[str]:
        return []

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        return []


def test_engines_that_gate_themselves_start_together_and_profile_in_turn(gpu0: Path) -> None:
    # Windows of 3 s (five steps), long against two spawns' skew on a loaded machine.
    runtime = GatedRuntime(gpu0, {"FAKE_IMPORT_S": "2", "FAKE_STEP_S": "0.6", "FAKE_HOLD_S": "1",
                                  "FAKE_LAST_LINE": "ValueError: the stack's own refusal"})
    cells = [_cell("a"), _cell("b")]
    outcomes: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda c=c: outcomes.__setitem__(c.id, run_cell(
        c, gpu0 / "logs", Timeouts(startup_s=60, replay_s=30), runtime=runtime))) for c in cells]  # type: ignore[arg-type]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    at = {(w, c): t for w, c, t in _events(gpu0 / "events")}
    a, b = (c.id for c in cells)
    first, second = (a, b) if at[("begin", a)] < at[("begin", b)] else (b, a)
    # Both spawned at once, not one after the other's KV cache ...
    assert at[("spawn", second)] < at[("imported", first)]
    # ... and their windows, memory snapshot to warm-up, one at a time.
    assert at[("begin", second)] >= at[("end", first)]
    gate_file = GpuGate(["0"]).paths[0]
    for start in runtime.starts:
        assert start.env[ENV] == str(gate_file) and start.env["PYTHONPATH"] == str(FOLDER)
    for cell in cells:
        out = outcomes[cell.id]
        assert out.status == "startup_failed" and out.signature == "ValueError: the stack's own refusal"
        assert out.fingerprint["gpu_gate"].startswith(
            "in the engine, init_device .. compile_or_warm_up_model: images/gpu_gate/vmatrix_gpu_gate.py sha256:")
    # The second engine's wait, from its own line, is timed apart from its start.
    waited = at[("begin", second)] - at[("imported", second)]
    assert waited > 0.5 and outcomes[second].timings["gpu_gate_wait_s"] == pytest.approx(waited, abs=0.3)
    assert outcomes[first].timings["gpu_gate_wait_s"] < 0.3
    # Its stop waited for the second's window (its memory is freed): timed apart again.
    assert outcomes[first].timings["gpu_gate_stop_wait_s"] > 0.2


def test_an_engine_whose_log_never_says_it_took_the_gate_is_named_in_its_fingerprint(gpu0: Path) -> None:
    # The hook off its path (say, an interpreter that skips sitecustomize): the start is not gated.
    runtime = GatedRuntime(gpu0, {"PYTHONPATH": "", "FAKE_LAST_LINE": "ValueError: the stack's own refusal"})
    out = run_cell(_cell("ungated"), gpu0 / "logs", Timeouts(startup_s=30, replay_s=30), runtime=runtime)  # type: ignore[arg-type]
    assert out.fingerprint["gpu_gate"].endswith("; a start's log does not say it took the gate")
    runtime = GatedRuntime(gpu0, {"FAKE_LAST_LINE": "ValueError: the stack's own refusal"})
    out = run_cell(_cell("gated"), gpu0 / "logs", Timeouts(startup_s=30, replay_s=30), runtime=runtime)  # type: ignore[arg-type]
    assert "does not say" not in out.fingerprint["gpu_gate"]


def test_an_engine_that_hangs_in_its_window_is_stopped_without_waiting_for_itself(gpu0: Path) -> None:
    runtime = GatedRuntime(gpu0, {"FAKE_PROFILE_S": "300"})
    t0 = time.monotonic()
    out = run_cell(_cell("hung"), gpu0 / "logs", Timeouts(startup_s=5, replay_s=30), runtime=runtime)  # type: ignore[arg-type]
    assert out.status == "timeout" and time.monotonic() - t0 < 60
    assert flock_holders(GpuGate(["0"]).paths[0]) == set()  # its engine is gone, the gate with it


def test_a_whole_gpu_cell_passes_no_gate_and_gets_no_share(gpu0: Path) -> None:
    runtime = ScriptRuntime(gpu0 / "events", ["ValueError: the stack's own refusal"], hold_s=0)
    blocker = GpuGate(["0"])
    blocker.acquire()  # a gate held by someone else does not concern a cell with the whole GPU
    try:
        out = run_cell(_cell("whole", gpus=1), gpu0 / "logs", Timeouts(startup_s=30, replay_s=30),
                       runtime=runtime)  # type: ignore[arg-type]
    finally:
        blocker.release()
    assert out.signature == "ValueError: the stack's own refusal" and "gpu_gate_wait_s" not in out.timings
    assert runtime.starts[0].memory_share is None and "gpu_gate" not in out.fingerprint


# vLLM's messages for an engine its share cannot hold, as vllm/v1/worker/utils.py
# (request_memory), vllm/v1/core/kv_cache_utils.py and torch word them.
NO_ROOM = ("ValueError: Free memory on device cuda:0 (20.5/139.8 GiB) on startup is less than desired GPU memory "
           "utilization (0.47, 65.71 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
NO_KV = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
TOO_SMALL = ("ValueError: To serve at least one request with the model's max seq len (16384), (1.5 GiB KV cache is "
             "needed, which is larger than the available KV cache memory (0.3 GiB). Try increasing `gpu_memory_utilization`")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"


@pytest.mark.parametrize(("line", "wanted"), [
    (NO_ROOM, "it wanted 65.71 GiB free at start, 20.5 of 139.8 GiB were"),
    (NO_KV, "weights and activations left no memory for the KV cache (-3.21 GiB)"),
    (TOO_SMALL, "its KV cache needs 1.5 GiB for one request of max_model_len, 0.3 GiB were left"),
    (OOM, "CUDA out of memory allocating 2.00 GiB"),
])
def test_a_cell_that_does_not_fit_says_so_in_one_line(line: str, wanted: str) -> None:
    log = f"$ vllm serve\nINFO Available KV cache memory: -3.21 GiB\n{line}\n"
    assert does_not_fit(log, 0.5, 0.47) == f"does not fit in 0.5 of a GPU (--gpu-memory-utilization 0.47): {wanted}"
    assert does_not_fit(f"$ first start\n{line}\n$ second start\nValueError: other\n", 0.5, 0.47) is None


def test_a_cell_that_does_not_fit_records_that_line_as_its_signature(gpu0: Path) -> None:
    runtime = ScriptRuntime(gpu0 / "events", [NO_ROOM], hold_s=0)
    out = run_cell(_cell("big", gpus=0.5), gpu0 / "logs", Timeouts(startup_s=30, replay_s=30), runtime=runtime)  # type: ignore[arg-type]
    assert out.status == "startup_failed"
    assert out.signature == ("does not fit in 0.5 of a GPU (--gpu-memory-utilization 0.47): "
                             "it wanted 65.71 GiB free at start, 20.5 of 139.8 GiB were")
    assert out.message is not None and out.message.startswith("ValueError: Free memory on device")


COLLISION = ("AssertionError: Error in memory profiling. Initial free memory 90.17 GiB, current free memory 98.22 GiB. "
             "This happens when other processes sharing the same container release GPU memory while vLLM is "
             "profiling during initialization.")


def test_memory_freed_while_profiling_is_started_again_once(gpu0: Path) -> None:
    runtime = ScriptRuntime(gpu0 / "events", [COLLISION, "ValueError: the stack's own refusal"], hold_s=0)
    cell = _cell("collided")
    out = run_cell(cell, gpu0 / "logs", Timeouts(startup_s=30, replay_s=30), runtime=runtime)  # type: ignore[arg-type]
    assert (gpu0 / "events").read_text().count("spawn") == 2
    assert out.signature == "ValueError: the stack's own refusal"
    assert out.timings["profiling_collision_restarts"] == 1
    assert profiling_collision(COLLISION) and not profiling_collision("ValueError: x") and not profiling_collision(None)
