"""Which host CPUs an engine on given GPUs runs on.

Two engines that start together on one GPU host were measured ~15% slower each than
one alone (docs/GPU.md): vLLM's start-up is mostly host-side work (imports, process
spawns, kernel loading), and unbound engines share every core and cache. Serving stacks
bind each engine to the cores of its GPU's NUMA node; vmatrix does the same when asked
(``VMATRIX_PIN_CPUS=1``): the GPUs that share a node split that node's cores evenly, in
GPU index order, so engines on different GPUs never share a core.

The topology comes from ``nvidia-smi`` (GPU index -> PCI bus id) and sysfs (bus id ->
``local_cpulist``). Where sysfs does not say, the allowed CPUs are split evenly over the
GPUs; without ``nvidia-smi`` nothing is bound.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

PIN_ENV = "VMATRIX_PIN_CPUS"


def pinning_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(PIN_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def format_cpulist(cpus: Sequence[int]) -> str:
    """The inverse of :func:`parse_cpulist`, as ``taskset``/``docker --cpuset-cpus`` take it."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = None
    for c in [*ordered, None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(parts)


def cpus_for_gpus(gpu_ids: Sequence[str], local_cpus: Mapping[str, Sequence[int]], allowed: Sequence[int]) -> list[int]:
    """The CPUs for an engine on ``gpu_ids``.

    ``local_cpus``: every GPU of the host (index -> its NUMA-local CPUs; empty where
    unknown). GPUs with the same local set share it: each takes an equal, contiguous
    slice, in index order. Only ``allowed`` CPUs are handed out (a container or cgroup
    may hold fewer than the node has). Returns [] when there is nothing to pin to.
    """
    allowed_set = set(allowed)
    if not gpu_ids or not local_cpus:
        return []
    groups: dict[tuple[int, ...], list[str]] = {}
    for gpu in sorted(local_cpus, key=_index_key):
        node = tuple(c for c in local_cpus[gpu] if c in allowed_set) or tuple(sorted(allowed_set))
        groups.setdefault(node, []).append(gpu)
    chosen: set[int] = set()
    for node, gpus in groups.items():
        share = len(node) // len(gpus)
        for i, gpu in enumerate(gpus):
            if gpu in gpu_ids and share:
                chosen.update(node[i * share : (i + 1) * share])
    return sorted(chosen)


def _index_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isdigit() else (1 << 30, gpu)


def host_gpu_cpus(sysfs: Path = Path("/sys/bus/pci/devices")) -> dict[str, list[int]]:
    """Every GPU nvidia-smi lists, with its NUMA-local CPUs ([] where sysfs does not say)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    gpus: dict[str, list[int]] = {}
    for line in out.splitlines():
        index, _, bus = (s.strip() for s in line.partition(","))
        if not index:
            continue
        # nvidia-smi prints 00000000:19:00.0; sysfs names the device 0000:19:00.0.
        path = sysfs / bus.lower()[-12:] / "local_cpulist"
        try:
            gpus[index] = parse_cpulist(path.read_text())
        except (OSError, ValueError):
            gpus[index] = []
    return gpus


def engine_cpus(gpu_ids: Sequence[str]) -> list[int]:
    """The CPUs to bind an engine on ``gpu_ids`` to; [] for no binding."""
    if not pinning_enabled() or not gpu_ids:
        return []
    return cpus_for_gpus(gpu_ids, host_gpu_cpus(), sorted(os.sched_getaffinity(0)))
