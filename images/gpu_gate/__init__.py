"""The GPU gate that an engine takes itself (``vmatrix_gpu_gate.py``, shipped to the
engine through PYTHONPATH with ``sitecustomize.py``): what vmatrix needs to know of it.

The two files next to this one run inside the engine and import nothing of vmatrix;
this module is vmatrix's side: the environment that arms them, and whether an installed
vLLM has the worker they gate (read from its source, without importing it).
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from vmatrix.images.gpu_gate.vmatrix_gpu_gate import BEGIN, END, ENV, TARGETS

FOLDER = Path(__file__).resolve().parent
HOOK = FOLDER / "vmatrix_gpu_gate.py"
# The worker the CUDA platform starts (vllm/platforms/cuda.py: ``parallel_config.worker_cls
# = "vllm.v1.worker.gpu_worker.Worker"`` in 0.25.1 .. 0.32.0).
CUDA_WORKER = "vllm.v1.worker.gpu_worker"


def gate_env(lock_files: Sequence[str | os.PathLike[str]]) -> dict[str, str]:
    """The engine's environment variables that make it take the gate on ``lock_files``
    (in this order) around its memory-critical start."""
    return {"PYTHONPATH": str(FOLDER), ENV: os.pathsep.join(str(f) for f in lock_files)}


def hook_id() -> str:
    """The hook as a run records it: its file and the start of its sha256."""
    return f"images/gpu_gate/vmatrix_gpu_gate.py sha256:{hashlib.sha256(HOOK.read_bytes()).hexdigest()[:12]}"


def cannot_gate(site_packages: Path, module: str = CUDA_WORKER) -> str | None:
    """Why the hook cannot gate the worker ``module`` of the vLLM installed in
    ``site_packages``; None when it can: the platform names that worker, and its class
    defines both ends of the window."""
    vllm = site_packages / "vllm"
    platform = vllm / "platforms" / "cuda.py"
    source = vllm.parent / (module.replace(".", "/") + ".py")
    class_name = TARGETS[module]
    try:
        platform_text = platform.read_text(errors="replace")
        tree = ast.parse(source.read_text(errors="replace"), str(source))
    except (OSError, SyntaxError, ValueError) as exc:
        return f"cannot read vLLM's worker ({exc})"
    if module == CUDA_WORKER and f'"{module}.{class_name}"' not in platform_text:
        return f"vllm/platforms/cuda.py does not name {module}.{class_name} as its worker"
    found = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if found is None:
        return f"{module} has no class {class_name}"
    methods = {n.name for n in found.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if missing := [m for m in (BEGIN, END) if m not in methods]:
        return f"{module}.{class_name} defines no {', '.join(missing)}"
    return None
