"""The cluster path for real: compose.yaml + compose.cpu.yaml up on this host's daemon, a
Ray head and two worker containers from the project's own image (images/Dockerfile.
orchestrator on the debootstrapped Debian base: no registry), engines as sibling
containers through the mounted socket, results in the compose volume.

The quickstart (examples/quickstart-docker.yaml: 4 cells, `runtime: docker`) is driven
from inside the head (`docker-compose exec ray-head vmatrix sweep run ... --address`):
a driver on this host would need a raylet of its own here, and Ray's sockets live in
the containers. One line of it is changed: `resources`, from 1 CPU and no GPUs to 1
CPU and 2 (logical) GPUs. A worker announces 2, the head none, so each cell takes a
whole worker: cells run on the workers only, two at a time as the local runtime runs
them on these 2 cores. Resources are not part of a cell's identity, so the cells are
the quickstart's, ids and all (checked).

Their verdicts and statuses are held, cell by cell, against the local runtime's for
the same cell ids: the end-to-end sweep of tests/test_sweep_e2e.py (session-scoped in
conftest.py) runs those four cells as local processes, so the quickstart is not run
locally twice. That sweep calibrates and aborts early; the local runs are graded here
again with the quickstart's own grading (nothing is recorded), so that only the
runtime differs.

The worker loss is folded into the same sweep: once the prefix-caching cell's engine
has answered its first request (mid-replay), that cell's worker container is killed
(SIGKILL). Ray must run the cell again on the other worker, the run must record both
attempts and still reach the local runtime's verdict, and the lost attempt's engine
container must not outlive its node. Everything the test started is torn down in the
fixture's finalizer, whatever the outcome, and that teardown is checked and shown
(`docker ps -a`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vmatrix.images.base import DEFAULT_TAG, build_base
from vmatrix.images.build import ImageBuildError, client
from vmatrix.orchestrator.runtimes.docker import CONTAINER_PORT, LABEL_CELL, LABEL_NODE, LABEL_OWNER

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

QUICKSTART = ROOT / "examples" / "quickstart-docker.yaml"
QUICKSTART_RESOURCES = "resources: {cpus: 1, gpus: 0}"
# A whole worker per cell (module docstring); nothing else of the quickstart changes.
MATRIX = QUICKSTART.read_text().replace(QUICKSTART_RESOURCES, "resources: {cpus: 1, gpus: 2}")

STEPS: dict[str, float] = {}  # step -> seconds, printed at the end (docs/cluster.md quotes them)
HEAD_PIDNS: list[str] = []  # the head's pid namespace, once it runs: the engines' owner (the driver) lives there


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


def _node(service: str) -> Any:
    """The container of one Compose service of the project (by label: v1 and v2 name them differently)."""
    found = DOCKER.containers.list(all=True, filters={"label": [f"com.docker.compose.project={PROJECT}",
                                                                f"com.docker.compose.service={service}"]})
    assert len(found) == 1, f"{service}: {[c.name for c in found]}"
    return found[0]


def _ours(container: Any) -> bool:
    """An engine container of this test's cluster: its owner (the sweep's driver, `host/pidns:pid`)
    ran in the head's pid namespace. Cell ids alone would not do: they are the quickstart's,
    which anyone on this daemon may be running."""
    owner = container.labels.get(LABEL_OWNER, "")
    return bool(HEAD_PIDNS) and owner.rpartition(":")[0].partition("/")[2] == HEAD_PIDNS[0]


def _engines(cell_id: str | None = None) -> list[Any]:
    from docker.errors import NotFound

    label = f"{LABEL_CELL}={cell_id}" if cell_id else LABEL_OWNER
    # docker-py lists, then inspects each container: one removed in between (an engine
    # going with its dead node, what this test waits for) raises NotFound. Look again.
    for _ in range(20):
        try:
            return [c for c in DOCKER.containers.list(all=True, filters={"label": label}) if _ours(c)]
        except NotFound:
            time.sleep(0.2)
    return [c for c in DOCKER.containers.list(all=True, filters={"label": label}) if _ours(c)]


def _our_containers() -> list[str]:
    nodes = DOCKER.containers.list(all=True, filters={"label": f"com.docker.compose.project={PROJECT}"})
    return [c.name for c in nodes] + [c.name for c in _engines()]


def _docker_ps(*filters: str) -> str:
    argv = ["docker", "ps", "-a", *(f for flt in filters for f in ("--filter", flt)),
            "--format", "{{.Names}}\t{{.Status}}\t{{.Label \"vmatrix.owner\"}}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return f"$ {' '.join(argv[:-2])}\n{out.stdout or '(none)'}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("cluster-work")
    (work / QUICKSTART.name).write_text(MATRIX)
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
        HEAD_PIDNS.append(str(os.stat(f"/proc/{_node('ray-head').attrs['State']['Pid']}/ns/pid").st_ino))
        t0 = time.monotonic()
        nodes: list[list] = []
        while time.monotonic() - t0 < 300:  # a worker's `ray start` may need a restart
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
        # The finalizer: runs whether the test passed, failed, or the bring-up itself did.
        t0 = time.monotonic()
        try:
            subprocess.run([*compose, "down", "-v", "--remove-orphans", "-t", "5"], cwd=ROOT, env=env,
                           capture_output=True, check=False, timeout=300)
        finally:
            # An engine the sweep failed to remove (a driver stopped by `down`, a lost attempt),
            # or a node `down` did not get to (interrupted): gone all the same.
            for name in _our_containers():
                with contextlib.suppress(Exception):
                    DOCKER.containers.get(name).remove(force=True)
        STEPS["down -v"] = time.monotonic() - t0
        if stage:
            staged.unlink()
        print("cluster steps (s):", json.dumps({k: round(v, 1) for k, v in STEPS.items()}))
        # What is left, as `docker ps -a` shows it: this project's nodes, and every vmatrix engine.
        print(_docker_ps(f"label=com.docker.compose.project={PROJECT}"))
        print(_docker_ps(f"label={LABEL_OWNER}"))
        assert _our_containers() == [], "containers left after teardown"


NODES_PY = ("import json, ray; ray.init(address='127.0.0.1:" + PORTS["VMATRIX_RAY_PORT"] + "', log_to_driver=False);"
            " print(json.dumps([[n['NodeID'], n['MetricsExportPort'], n['Alive']] for n in ray.nodes()]))")


def _served(container: Any) -> float:
    """Requests the engine in ``container`` has answered (0 while it starts or when unreachable)."""
    with contextlib.suppress(Exception):
        container.reload()
        port = container.ports[f"{CONTAINER_PORT}/tcp"][0]["HostPort"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "vllm:request_success_total")
    return 0.0


def _local_grades(e2e_sweep, plan) -> dict[str, tuple[str, str, str | None]]:
    """cell id -> (status, verdict, signature) of the local runtime's run of each of ``plan``'s
    cells, graded with ``plan``'s grading (the e2e sweep's own calibrates; nothing is recorded)."""
    from vmatrix.cells import RunOutcome
    from vmatrix.orchestrator.sweep.grading import grade_cell

    local_plan, store, *_ = e2e_sweep
    local = {c.id: c for c in local_plan.cells}
    missing = [c.knobs for c in plan.cells if c.id not in local]
    assert not missing, f"cells of the quickstart that the local e2e sweep does not run: {missing}"
    out = {}
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        outcome = RunOutcome(cell.id, run.status, run.started_at, run.finished_at, signature=run.signature,
                             message=run.message, transcript=store.transcript_for(run.id), log_path=run.log_path)
        out[cell.id] = (run.status, grade_cell(store, local[cell.id], outcome, plan.spec.grading).verdict,
                        run.signature)
    return out


# The session's e2e sweep (conftest.py) is set up within this test's time when this file
# runs first, as it does in the suite: its 4-5 minutes (half an hour at a load of 10-17)
# and the cluster's sweep do not fit the suite's 30 minutes per test on a busy host.
@pytest.mark.timeout(3600)
def test_quickstart_through_the_head_matches_the_local_runtime_and_survives_a_lost_worker(
        e2e_sweep, cluster, tmp_path: Path) -> None:
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec, parse_spec

    compose, env, _, workers = cluster
    plan = expand(parse_spec(MATRIX, QUICKSTART.name), QUICKSTART.name)
    assert QUICKSTART_RESOURCES in QUICKSTART.read_text() and MATRIX != QUICKSTART.read_text()
    assert [c.id for c in plan.cells] == [c.id for c in expand(load_spec(QUICKSTART, check_index=False),
                                                               QUICKSTART.name).cells]
    assert len(plan.cells) == 4
    local = _local_grades(e2e_sweep, plan)
    victim = next(c for c in plan.cells if c.knobs["prefix_caching"] and not c.knobs["speculative"])
    t0 = time.monotonic()
    driver = subprocess.Popen([*compose, "exec", "-T", "ray-head", "vmatrix", "sweep", "run",
                               f"/work/{QUICKSTART.name}", "--address", "127.0.0.1:" + PORTS["VMATRIX_RAY_PORT"],
                               "--db", "/data/results.db"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed, lost = None, set()
    try:
        # Mid-cell: the victim's engine has answered a request, so its replay is under way.
        while killed is None and driver.poll() is None and time.monotonic() - t0 < 1200:
            for engine in _engines(victim.id):
                if _served(engine) >= 1:
                    node = engine.labels.get(LABEL_NODE)
                    killed = next(svc for svc, n in workers.items() if n == node)
                    _node(killed).kill()
                    t_kill = time.monotonic()
                    STEPS["sweep start -> victim mid-replay, worker killed"] = t_kill - t0
                    lost = {engine.id}
                    break
            time.sleep(0.5)
        # The lost attempt's engine goes once Ray calls its node dead, not at the sweep's end.
        while lost and driver.poll() is None and time.monotonic() - t0 < 1500:
            if not lost & {c.id for c in _engines()}:
                STEPS["kill -> lost engine removed"] = time.monotonic() - t_kill
                break
            time.sleep(2)
        out, _ = driver.communicate(timeout=max(60.0, 1500 - (time.monotonic() - t0)))
    finally:
        if driver.poll() is None:
            driver.kill()
    STEPS["sweep (4 cells, one retried)"] = time.monotonic() - t0
    print(out[-3000:])
    assert killed, f"the victim cell was never seen mid-replay on a worker; driver said: {(out or '')[-2000:]}"
    assert "kill -> lost engine removed" in STEPS, "the lost attempt's engine outlived its node until the sweep ended"
    assert driver.returncode == 0, out[-2000:]
    # Nothing of the sweep runs any more, the lost attempt's engine included.
    assert [c.name for c in _engines()] == []

    _run(["docker", "cp", f"{_node('ray-head').name}:/data", str(tmp_path / "data")], env, 60)
    store = Store.open(tmp_path / "data" / "results.db")
    runs = {c.id: store.latest_run(c.id) for c in plan.cells}
    assert all(runs.values()), f"a cell has no run: {out[-2000:]}"
    survivor = workers[next(s for s in workers if s != killed)]
    got = {}
    for cell in plan.cells:
        run = runs[cell.id]
        got[cell.id] = (run.status, store.latest_grade(run.id).verdict, run.signature)
        nodes = [a["ray_node"] for a in run.attempts]
        if cell.id == victim.id:
            assert nodes == [workers[killed], survivor], run.attempts  # lost, then retried on the other worker
        else:
            assert len(nodes) == 1 and nodes[0] in workers.values(), run.attempts  # a worker, never the head
    # Cell by cell, what the local runtime's processes got: status and verdict, and for a
    # failed run the signature (the same engine fails the same way in a container).
    for cell in plan.cells:
        status, verdict, signature = got[cell.id]
        want = local[cell.id]
        assert (status, verdict) == want[:2], (cell.knobs, got[cell.id], want)
        assert status == "ok" or signature == want[2], (cell.knobs, signature, want[2])
    # The quickstart exercises what it is for: not four failures that merely agree.
    assert got[plan.controls[0].id][1] == "control" and "clean" in {v for _, v, _ in got.values()}, got
    # Spread over both workers: the killed one had finished a cell before it died (the
    # victim only starts once a worker is free), the survivor the rest.
    assert {runs[c.id].attempts[-1]["ray_node"] for c in plan.cells} == set(workers.values()), \
        {c.id: runs[c.id].attempts for c in plan.cells}

