"""LMCache knobs: cell identity, the files and argv a cell gets, geometry rules, `invalid` cells.

No engine here: what the engine does with these is tests/test_lmcache_e2e.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from vmatrix.db.queries import lookup_table, render_table
from vmatrix.db.store import Store
from vmatrix.errors import SpecError
from vmatrix.jobs.trace_synth import synth_trace
from vmatrix.jobs.traces import save_trace
from vmatrix.jobs.workload import workload_digest
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.spec.workload import WorkloadSpec
from vmatrix.orchestrator.stack import lmcache
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.orchestrator.stack.geometry import violations
from vmatrix.orchestrator.sweep.scheduler import run_sweep
from vmatrix.recipe import EngineRecipe

BASE = """\
name: t
engines:
  - vllm: "0.32.0"
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
"""
LMC = """\
name: t
engines: [{vllm: "0.32.0", lmcache: "0.5.6"}]
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [true]
  lmcache_connector: [LMCacheConnectorV1]
"""
PY = Path("/venv/bin/python")
ENGINE = EngineRecipe(vllm="0.32.0", lmcache="0.5.6")


def plan(text: str):
    return expand(parse_spec(text, "t.yaml"), "t.yaml")


@pytest.mark.usefixtures("canary_of_698bac9")
def test_cell_ids_recorded_before_lmcache_knobs_are_unchanged() -> None:
    # Computed on main at 698bac9, before the LMCache knobs existed: results recorded
    # then must still be found (and skipped) by the same cells now.
    ids = {c.id for c in plan(BASE).cells}
    assert ids == {"f9a7bad9c5f0181d", "9e18e35a5d5a196d", "31fc075f5509c08b", "c5785580dea19396"}
    text = BASE + "include:\n  - {block_size: 64, prefix_caching: true, max_num_batched_tokens: 96, mamba_cache_mode: align}\n"
    assert {"6749bab2ccc38f44", "e4d0bdee07774ae5"} <= {c.id for c in plan(text).cells}


@pytest.mark.usefixtures("canary_of_698bac9")  # the canary workload without its (later) expected answers
def test_workload_digests_without_restarts_are_unchanged(tmp_path: Path) -> None:
    # Also pinned from 698bac9: a trace without restart points keeps its digest ...
    path = tmp_path / "t.jsonl"
    save_trace(synth_trace(0, 2, 2, 200, 1), path)
    spec = WorkloadSpec(kind="trace", trace=str(path), max_tokens=8)
    assert workload_digest(spec) == "8a6b2a0d7db7e1a3ffb6c6729f8ec7591c6913ca2f9c91ac7493219d92ea97be"
    assert workload_digest(WorkloadSpec()) == "33d204cfa6cdfb5aa05b48ffe9315a51ede458da7bfa8f3c22b681a23ba67459"
    # ... while one with a restart is a different experiment now that restarts are executed.
    save_trace(synth_trace(0, 2, 2, 200, 1, restart_after=["turn-0"]), path)
    assert workload_digest(spec) != "8a6b2a0d7db7e1a3ffb6c6729f8ec7591c6913ca2f9c91ac7493219d92ea97be"


def test_lmcache_knobs_without_a_connector_are_one_cell() -> None:
    off = Knobs(prefix_caching=True).canonical()
    assert Knobs(prefix_caching=True, lmcache_chunk_size=512, kv_role="kv_both").canonical() == off
    assert "lmcache_connector" not in off
    on = Knobs(prefix_caching=True, lmcache_connector="LMCacheConnectorV1", lmcache_chunk_size=512).canonical()
    assert on["lmcache_chunk_size"] == 512 and "lmcache_l1_gb" not in on
    cells = plan(LMC + "  lmcache_chunk_size: [256, 512]\ncontrol: {prefix_caching: false, lmcache_connector: null}\n").cells
    # Two LMCache cells and one control: the control's chunk sizes collapse into one cell.
    assert len(cells) == 3 and len(plan(LMC).controls) == 1
    [control] = [c for c in cells if c.is_control]
    assert "lmcache_connector" not in control.knobs and "lmcache_chunk_size" not in control.knobs


def test_unknown_connector_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"t.yaml:6: axes.lmcache_connector\[0\]"):
        plan(LMC.replace("[LMCacheConnectorV1]", "[LMCacheConnectorV2]"))


def test_v1_config_file_env_and_argv(tmp_path: Path) -> None:
    knobs = Knobs(prefix_caching=True, lmcache_connector="LMCacheConnectorV1", lmcache_chunk_size=512,
                  lmcache_l1_gb=0.5, lmcache_l2_disk=True).canonical()
    setup = lmcache.prepare(knobs, PY, tmp_path / "run", (5555, 8080))
    assert setup is not None and setup.sidecar is None
    assert setup.config_path == tmp_path / "run" / "lmcache.yaml"
    assert setup.env == {"LMCACHE_CONFIG_FILE": str(setup.config_path)}
    config = yaml.safe_load(setup.config_path.read_text())
    assert config == {"chunk_size": 512, "local_cpu": True, "max_local_cpu_size": 0.5,
                      "local_disk": f"file://{tmp_path}/run/l2/", "max_local_disk_size": lmcache.L2_DISK_GB}
    assert (tmp_path / "run" / "l2").is_dir()
    argv = engine_argv(PY, ENGINE, knobs, "/m", 8000, kv_transfer=setup.kv_transfer)
    config_arg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config_arg == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def test_each_run_folder_has_its_own_l2(tmp_path: Path) -> None:
    knobs = Knobs(lmcache_connector="LMCacheConnectorV1", lmcache_l2_disk=True).canonical()
    a = lmcache.prepare(knobs, PY, tmp_path / "cell-a", (1, 2))
    b = lmcache.prepare(knobs, PY, tmp_path / "cell-b", (1, 2))
    assert a and b and a.l2_dir != b.l2_dir
    # Without L2 on, LMCache keeps its defaults and writes nothing to disk.
    c = lmcache.prepare(Knobs(lmcache_connector="LMCacheConnectorV1").canonical(), PY, tmp_path / "c", (1, 2))
    assert c and c.l2_dir is None and yaml.safe_load(c.config_path.read_text()) == {"local_cpu": True}


def test_multiprocess_connector_gets_a_sidecar(tmp_path: Path) -> None:
    knobs = Knobs(lmcache_connector="LMCacheMPConnector", lmcache_chunk_size=256, lmcache_l1_gb=1,
                  lmcache_l2_disk=True, kv_role="kv_producer").canonical()
    setup = lmcache.prepare(knobs, PY, tmp_path / "run", (5601, 8601))
    assert setup is not None and setup.sidecar is not None and setup.config_path is None
    argv = setup.sidecar.argv
    assert argv[:3] == [str(PY), "-m", "lmcache.v1.multiprocess.http_server"]
    assert argv[argv.index("--port") + 1] == "5601" and argv[argv.index("--http-port") + 1] == "8601"
    assert argv[argv.index("--chunk-size") + 1] == "256" and argv[argv.index("--l1-size-gb") + 1] == "1.0"
    assert json.loads(argv[argv.index("--l2-adapter") + 1]) == {"type": "fs", "base_path": str(tmp_path / "run" / "l2")}
    assert argv[argv.index("--eviction-policy") + 1] == "LRU"
    assert setup.sidecar.health_url == "http://127.0.0.1:8601/healthcheck"
    unset = lmcache.sidecar_argv(PY, Knobs(lmcache_connector="LMCacheMPConnector").canonical(), None, 1, 2)
    assert unset[unset.index("--l1-size-gb") + 1] == str(lmcache.MP_DEFAULT_L1_GB) and "--l2-adapter" not in unset
    assert setup.kv_transfer == {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_producer",
                                 "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                                               "lmcache.mp.port": 5601}}


def test_no_lmcache_no_files_no_flag(tmp_path: Path) -> None:
    knobs = Knobs(prefix_caching=True, lmcache_chunk_size=512).canonical()
    assert lmcache.prepare(knobs, PY, tmp_path / "run", (1, 2)) is None and not (tmp_path / "run").exists()
    assert "--kv-transfer-config" not in engine_argv(PY, ENGINE, knobs, "/m", 8000)


def rules(engine: EngineRecipe = ENGINE, **knobs: object) -> list[str]:
    return [v.rule for v in violations(engine, Knobs(**knobs).canonical())]


def test_geometry_rules() -> None:
    v1 = {"lmcache_connector": "LMCacheConnectorV1"}
    assert rules(block_size=384, **v1) == ["lmcache-chunk-multiple-of-block"]  # LMCache's default chunk is 256
    assert rules(block_size=384, lmcache_chunk_size=768, **v1) == []
    assert rules(block_size=384, lmcache_chunk_size=768) == []  # LMCache off: its chunk size means nothing
    assert rules(mamba_cache_mode="align", block_size=1600, max_num_batched_tokens=1536) == ["align-block-le-batched"]
    assert rules(mamba_cache_mode="align", block_size=800, max_num_batched_tokens=2048) == []
    assert rules(mamba_cache_mode="align", block_size=800, max_num_batched_tokens=1600, lmcache_chunk_size=800,
                 **v1) == ["align-lmcache-batched-lt-2-blocks"]
    assert rules(mamba_cache_mode="align", block_size=800, max_num_batched_tokens=1599, lmcache_chunk_size=800,
                 **v1) == []
    assert rules(mamba_cache_mode="all", block_size=1600, max_num_batched_tokens=1536) == []
    # A block size left to the engine cannot be checked before it starts.
    assert rules(mamba_cache_mode="align", max_num_batched_tokens=16, **v1) == []
    assert rules(EngineRecipe(vllm="0.32.0"), **v1) == ["lmcache-not-installed"]
    [v] = violations(ENGINE, Knobs(block_size=384, **v1).canonical())
    assert str(v) == "lmcache-chunk-multiple-of-block: LMCache chunk size (256) must be a multiple of block_size (384)"


INVALID = LMC + """\
  block_size: [384]
control: {prefix_caching: false, lmcache_connector: null, block_size: null}
"""


def test_invalid_cells_are_recorded_without_an_engine(tmp_path: Path) -> None:
    """Only the invalid cell is in the plan, so run_sweep must record it without Ray or an engine."""
    p = plan(INVALID)
    bad = [c for c in p.cells if not c.is_control]
    store = Store.open(tmp_path / "r.db")
    sweep = store.create_sweep("t", "t.yaml", INVALID)
    from vmatrix.orchestrator.plan.matrix import Plan

    result = run_sweep(Plan(spec=p.spec, cells=bad), store, sweep, tmp_path / "logs")
    assert result.ran == [bad[0].id]
    run = store.latest_run(bad[0].id)
    assert run is not None and run.status == "invalid" and run.timings == {}
    assert run.signature == "lmcache-chunk-multiple-of-block: LMCache chunk size (256) must be a multiple of block_size (384)"
    assert "run_invalid: true" in (run.message or "")
    grade = store.latest_grade(run.id)
    assert grade is not None and grade.verdict == "invalid"
    table = render_table(lookup_table(store, ["engine"], ["block_size"], sweep), "markdown")
    assert "invalid (lmcache-chunk-multiple-of-block" in table
    assert not (tmp_path / "logs").exists(), "no engine, no log"
    # The same sweep again: recorded, so skipped.
    again = run_sweep(Plan(spec=p.spec, cells=bad), store, store.create_sweep("t", "t.yaml", INVALID), tmp_path / "logs")
    assert again.skipped == [bad[0].id] and again.ran == []


def test_run_invalid_flag() -> None:
    assert parse_spec(INVALID + "run_invalid: true\n", "t.yaml").run_invalid
    assert not parse_spec(INVALID, "t.yaml").run_invalid


def test_plan_marks_invalid_cells(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app

    matrix = tmp_path / "m.yaml"
    matrix.write_text(INVALID)
    result = CliRunner().invoke(app, ["sweep", "plan", str(matrix)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "cell (invalid: lmcache-chunk-multiple-of-block)" in result.output


def test_signature_reads_only_what_this_start_wrote(tmp_path: Path) -> None:
    """A restarted engine appends to the run's log; the first life's errors are not the second's."""
    import sys

    from vmatrix.orchestrator.runtimes.processes import EngineProcess

    log = tmp_path / "engine.log"
    proc = EngineProcess(argv=[sys.executable, "-c", "raise ValueError('first life')"], env={}, log_path=log, port=1)
    proc.start()
    proc.proc.wait(30)
    proc.stop()
    assert proc.signature() == "ValueError: first life"
    proc.argv = [sys.executable, "-c", "print('second life is fine')"]
    proc.start()
    proc.proc.wait(30)
    proc.stop()
    assert proc.signature() is None
    assert "first life" in log.read_text() and "\n$ " in log.read_text()


def test_engine_started_from_a_thread_outlives_the_thread(tmp_path: Path) -> None:
    """A restart starts the engine from a worker thread (asyncio.to_thread).

    PR_SET_PDEATHSIG fires when the forking thread exits: before engines were forked
    from one long-lived thread, a restarted engine was SIGKILLed as soon as the replay's
    thread pool shut down, and its cell was recorded `crashed` (CI, 2026-11-30).
    """
    import sys
    import threading

    from vmatrix.orchestrator.runtimes.processes import EngineProcess

    proc = EngineProcess(argv=[sys.executable, "-c", "import time; time.sleep(60)"], env={}, log_path=tmp_path / "log",
                         port=1)
    starter = threading.Thread(target=proc.start)
    starter.start()
    starter.join()
    try:
        # The kernel signals the child at the thread's exit; give it time to arrive.
        time.sleep(1.0)
        assert proc.alive(), f"engine died with its starting thread: returncode {proc.returncode}"
    finally:
        proc.stop(grace_s=1)
    assert not proc.alive()
