"""The cluster path for real: compose.yaml + compose.cpu.yaml up on this host's daemon, a
Ray head and two worker containers from the project's own image (images/Dockerfile.
orchestrator on the debootstrapped Debian base: no registry), engines as sibling
containers through the mounted socket, results in the compose volume.

The sweep is driven from inside the head (`docker-compose exec ray-head vmatrix sweep
run ... --address`): a driver on this host would need a raylet of its own here, and
Ray's sockets live in the containers. Each cell asks for 2 GPUs (logical: a worker
announces 2, the head none), so the two cells must take one worker each. A few
seconds after the prefix-caching cell's engine container appears, its worker
container is killed (SIGKILL): Ray must run that cell again on the other worker, the
run must record both attempts and still reach the local runtime's verdict, and the
lost attempt's engine container must not outlive the sweep.

Smaller than examples/quickstart-docker.yaml (2 cells, not 4; a shorter workload, the
one tests/test_docker.py grades): what is under test is placement, loss and retry
across containers, and the two cells are the ones whose local verdicts are
established (control, and prefix caching graded clean). Everything the test started
is torn down in the fixture's finalizer, whatever the outcome, and that teardown is
checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from images.base import DEFAULT_TAG, build_base
from images.build import ImageBuildError, client
from orchestrator.runtimes.docker import LABEL_CELL, LABEL_SWEEP

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "vmatrix-cluster-test"  # the Compose project: names and labels every node container
try:
    DOCKER = client()
except ImageBuildError as exc:
    DOCKER, WHY = None, str(exc)


def _compose() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 check=False).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


COMPOSE = _compose()
pytestmark = [
    pytest.mark.docker, pytest.mark.engine,
    pytest.mark.skipif(DOCKER is None, reason=f"no Docker daemon: {WHY if DOCKER is None else ''}"),
    pytest.mark.skipif(COMPOSE is None, reason="no Compose tool (docker compose / docker-compose)"),
]

# Ports of their own (host network): another Ray on this machine may hold the defaults.
PORTS = {"VMATRIX_RAY_PORT": "6479", "VMATRIX_DASHBOARD_PORT": "8375", "VMATRIX_HEAD_AGENT_PORT": "52465",
         "VMATRIX_WORKER_AGENT_PORT": "52466", "VMATRIX_WORKER2_AGENT_PORT": "52467",
         "VMATRIX_HEAD_METRICS_PORT": "8190", "VMATRIX_WORKER_METRICS_PORT": "8191",
         "VMATRIX_WORKER2_METRICS_PORT": "8192"}
WORKERS = {"ray-worker-cpu": 8191, "ray-worker-cpu-2": 8192}  # service -> its metrics port, how ray.nodes() names it

MATRIX = f"""\
name: cluster
runtime: docker
images: {{base: "{DEFAULT_TAG}"}}
engines: [{{vllm: "0.32.0"}}]
model: {{canary: tiny-qwen3next}}
axes:
  prefix_caching: [false, true]
workloads:
  - {{name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}}
resources: {{cpus: 1, gpus: 2}}
"""

STEPS: dict[str, float] = {}  # step -> seconds, printed at the end (docs/cluster.md quotes them)


def _files() -> list[str]:
    files = ["-f", "compose.yaml", "-f", "compose.cpu.yaml"]
    # This sandbox's pip settings (a TLS-intercepting proxy's CA, a wheelhouse): without
    # them the nodes compute other engine image tags than the host and build their own.
    if Path("/opt/wheels").is_dir() and Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        files += ["-f", "examples/compose.site.yaml"]
    return files


def _run(argv: list[str], env: dict[str, str], timeout: float, step: str | None = None) -> str:
    t0 = time.monotonic()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if step:
        STEPS[step] = time.monotonic() - t0
    assert out.returncode == 0, f"{argv[:6]} exited {out.returncode}: {(out.stderr or out.stdout)[-2000:]}"
    return out.stdout


def _our_containers() -> list[str]:
    nodes = DOCKER.containers.list(all=True, filters={"label": f"com.docker.compose.project={PROJECT}"})
    engines = DOCKER.containers.list(all=True, filters={"label": f"{LABEL_SWEEP}"})
    return [c.name for c in nodes] + [c.name for c in engines if c.labels.get(LABEL_CELL) in CELLS]


CELLS: set[str] = set()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("cluster-work")
    (work / "cluster.yaml").write_text(MATRIX)
    cache = os.environ.get("VMATRIX_CACHE", str(Path.home() / ".cache" / "vmatrix"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMATRIX_")} | PORTS | {
        "VMATRIX_ORCH_BASE": DEFAULT_TAG, "VMATRIX_CACHE": cache, "VMATRIX_WORK": str(work)}
    compose = [*COMPOSE, "-p", PROJECT, *_files()]  # type: ignore[misc]
    # The orchestrator image pip-installs from PyPI; behind an intercepting proxy its build
    # needs the proxy's CA, which a site puts in images/site/ (git-ignored).
    staged = ROOT / "images" / "site" / "ca.crt"
    cert = Path("/etc/ssl/certs/ca-certificates.crt")
    stage = not staged.exists() and Path("/opt/wheels").is_dir() and cert.is_file()
    if stage:
        shutil.copyfile(cert, staged)
    try:
        t0 = time.monotonic()
        build_base(DEFAULT_TAG)  # a look-up once CI (or an earlier test) built it
        STEPS["base image"] = time.monotonic() - t0
        _run([*compose, "build", "ray-head"], env, 900, "build node image")
        _run([*compose, "up", "-d"], env, 120, "up -d")
        t0 = time.monotonic()
        nodes: list[list] = []
        while time.monotonic() - t0 < 180:
            out = subprocess.run([*compose, "exec", "-T", "ray-head", "python", "-c", NODES_PY], cwd=ROOT, env=env,
                                 capture_output=True, text=True, check=False, timeout=120)
            if out.returncode == 0:
                nodes = json.loads(out.stdout.strip().splitlines()[-1])
                if len([n for n in nodes if n[2]]) == 3:
                    break
            time.sleep(3)
        STEPS["3 nodes in the cluster"] = time.monotonic() - t0
        alive = {port: node for node, port, up in nodes if up}
        assert set(WORKERS.values()) <= set(alive), f"worker nodes did not join: {nodes}"
        yield compose, env, work, {svc: alive[port] for svc, port in WORKERS.items()}
    finally:
        t0 = time.monotonic()
        subprocess.run([*compose, "down", "-v", "--remove-orphans", "-t", "5"], cwd=ROOT, env=env,
                       capture_output=True, check=False, timeout=300)
        # An engine whose attempt was lost and that the sweep failed to remove: gone all the same.
        for name in _our_containers():
            with contextlib.suppress(Exception):
                DOCKER.containers.get(name).remove(force=True)
        STEPS["down -v"] = time.monotonic() - t0
        if stage:
            staged.unlink()
        print("cluster steps (s):", json.dumps({k: round(v, 1) for k, v in STEPS.items()}))
        assert _our_containers() == [], "containers left after teardown"


NODES_PY = ("import json, ray; ray.init(address='127.0.0.1:" + PORTS["VMATRIX_RAY_PORT"] + "', log_to_driver=False);"
            " print(json.dumps([[n['NodeID'], n['MetricsExportPort'], n['Alive']] for n in ray.nodes()]))")


def _running_node(cell_id: str) -> str | None:
    from ray.util.state import list_tasks

    with contextlib.suppress(Exception):  # the dashboard is busy or the task not yet listed
        tasks = list_tasks(address="http://127.0.0.1:" + PORTS["VMATRIX_DASHBOARD_PORT"],
                           filters=[("name", "=", f"cell-{cell_id}"), ("state", "=", "RUNNING")], timeout=10)
        return tasks[0].node_id if tasks else None
    return None


def test_sweep_through_the_head_spreads_cells_and_retries_a_lost_workers_cell(cluster, tmp_path: Path) -> None:
    from db.store import Store
    from orchestrator.matrix import expand
    from orchestrator.spec import parse_spec

    compose, env, _, workers = cluster
    plan = expand(parse_spec(MATRIX, "cluster.yaml"), "cluster.yaml")
    assert len(plan.cells) == 2
    CELLS.update(c.id for c in plan.cells)
    victim = next(c for c in plan.cells if c.knobs["prefix_caching"])
    t0 = time.monotonic()
    driver = subprocess.Popen([*compose, "exec", "-T", "ray-head", "vmatrix", "sweep", "run", "/work/cluster.yaml",
                               "--address", "127.0.0.1:" + PORTS["VMATRIX_RAY_PORT"], "--db", "/data/results.db"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = None
    try:
        # Mid-cell: the victim's engine container has been up a few seconds (engine start).
        while killed is None and driver.poll() is None and time.monotonic() - t0 < 420:
            engines = DOCKER.containers.list(filters={"label": f"{LABEL_CELL}={victim.id}"})
            node = _running_node(victim.id) if engines else None
            if node:
                time.sleep(5)
                killed = next(svc for svc, n in workers.items() if n == node)
                DOCKER.containers.get(f"{PROJECT}_{killed}_1").kill()
                t_kill = time.monotonic()
                STEPS["victim's engine up -> kill"] = t_kill - t0
            time.sleep(2)
        # The lost attempt's engine goes once Ray calls its node dead, not at the sweep's end.
        lost = {c.id for c in engines} if killed else set()
        while lost and driver.poll() is None and time.monotonic() - t0 < 900:
            if not lost & {c.id for c in DOCKER.containers.list(all=True, filters={"label": LABEL_SWEEP})}:
                STEPS["kill -> lost engine removed"] = time.monotonic() - t_kill
                break
            time.sleep(2)
        out, _ = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
    STEPS["sweep (2 cells, one retried)"] = time.monotonic() - t0
    assert killed, f"the victim cell never ran on a worker; driver said: {(out or '')[-2000:]}"
    assert "kill -> lost engine removed" in STEPS, "the lost attempt's engine outlived its node until the sweep ended"
    # Nothing of the sweep runs any more, the lost attempt's engine included.
    assert [c.name for c in DOCKER.containers.list(all=True, filters={"label": LABEL_SWEEP})
            if c.labels.get(LABEL_CELL) in CELLS] == []

    head = f"{PROJECT}_ray-head_1"
    _run(["docker", "cp", f"{head}:/data", str(tmp_path / "data")], env, 60)
    store = Store.open(tmp_path / "data" / "results.db")
    runs = {c.id: store.latest_run(c.id) for c in plan.cells}
    assert all(runs.values()), f"a cell has no run: {out[-2000:]}"
    survivor = workers[next(s for s in workers if s != killed)]
    for cell in plan.cells:
        run = runs[cell.id]
        grade = store.latest_grade(run.id)
        # The local runtime's verdicts for these two cells (README, tests/test_docker.py).
        want = "clean" if cell.knobs["prefix_caching"] else "control"
        assert run.status == "ok" and grade.verdict == want, (cell.knobs, run.status, run.signature, grade.summary)
        nodes = [a["ray_node"] for a in run.attempts]
        if cell.id == victim.id:
            assert nodes == [workers[killed], survivor], run.attempts  # lost, then retried on the other worker
        else:
            assert nodes == [survivor], run.attempts
    # Before the kill the two cells ran side by side, one per worker.
    assert {runs[victim.id].attempts[0]["ray_node"], *(a["ray_node"] for r in runs.values() for a in r.attempts)} \
        == set(workers.values())
