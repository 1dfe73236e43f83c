"""CPU binding of GPU engines (orchestrator/runtimes/affinity.py): pure topology maths,
and a real process bound through EngineProcess."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vmatrix.orchestrator.runtimes.affinity import cpus_for_gpus, format_cpulist, parse_cpulist, pinning_enabled


def test_cpulist_round_trip() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpulist([5]) == "5" and format_cpulist([]) == ""


def test_gpus_on_one_node_split_its_cores_in_index_order() -> None:
    # A 2-socket host: GPUs 0,1 on node 0 (cores 0-15), GPUs 2,3 on node 1 (16-31).
    node0, node1 = list(range(16)), list(range(16, 32))
    topo = {"0": node0, "1": node0, "2": node1, "3": node1}
    allowed = list(range(32))
    assert cpus_for_gpus(["0"], topo, allowed) == list(range(8))
    assert cpus_for_gpus(["1"], topo, allowed) == list(range(8, 16))
    assert cpus_for_gpus(["3"], topo, allowed) == list(range(24, 32))
    # Tensor parallel over two GPUs: both slices.
    assert cpus_for_gpus(["1", "2"], topo, allowed) == list(range(8, 24))
    # Engines on different GPUs never share a core.
    slices = [set(cpus_for_gpus([g], topo, allowed)) for g in topo]
    assert sum(map(len, slices)) == len(set().union(*slices)) == 32


def test_unknown_topology_splits_the_allowed_cpus_evenly() -> None:
    topo: dict[str, list[int]] = {"0": [], "1": []}
    allowed = [2, 3, 4, 5, 6, 7]  # a cgroup that holds only some of the host's cores
    assert cpus_for_gpus(["0"], topo, allowed) == [2, 3, 4]
    assert cpus_for_gpus(["1"], topo, allowed) == [5, 6, 7]
    # A node's cores outside the allowed set are never handed out.
    assert cpus_for_gpus(["0"], {"0": [0, 1, 2, 3]}, [2, 3]) == [2, 3]
    assert cpus_for_gpus([], topo, allowed) == [] and cpus_for_gpus(["0"], {}, allowed) == []


def test_pinning_is_opt_in() -> None:
    assert not pinning_enabled({})
    assert pinning_enabled({"VMATRIX_PIN_CPUS": "1"}) and not pinning_enabled({"VMATRIX_PIN_CPUS": "0"})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind to one of them")
def test_engine_process_and_its_children_are_bound(tmp_path: Path) -> None:
    from vmatrix.orchestrator.runtimes.processes import EngineProcess

    cpu = max(os.sched_getaffinity(0))
    out = tmp_path / "affinity"
    # The child of the engine process reports: binding must reach the engine's own children.
    code = ("import os, subprocess, sys; subprocess.run([sys.executable, '-c', "
            f"\"import os; open({str(out)!r}, 'w').write(repr(sorted(os.sched_getaffinity(0))))\"], check=True)")
    proc = EngineProcess(argv=[sys.executable, "-c", code], env={}, log_path=tmp_path / "log", port=1, cpus=(cpu,))
    proc.start()
    assert proc.proc is not None and proc.proc.wait(60) == 0
    proc.stop()
    assert out.read_text() == repr([cpu])
    assert f"# bound to CPUs {cpu}" in (tmp_path / "log").read_text()
