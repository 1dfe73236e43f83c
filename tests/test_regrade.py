"""A cell recorded before its control ran is graded once the control exists.

Synthetic recorded runs (no engine): the store and the grading path are real.
"""

from __future__ import annotations

import time
from pathlib import Path

from vmatrix.cells import Grade, RunOutcome
from vmatrix.db.store import Store
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.grading import grade_waiting
from vmatrix.records import RequestRecord, Transcript

MATRIX = """\
name: r
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
axes: {prefix_caching: [false, true]}
"""


def outcome(cell_id: str, tokens: list[int]) -> RunOutcome:
    now = time.time()
    req = RequestRecord(key="s0/0", session="s0", turn=0, phase="turn-0", token_ids=tokens, margins=[1.0] * 3)
    return RunOutcome(cell_id, "ok", now, now, transcript=Transcript([req]))


def test_ungraded_cell_is_graded_when_its_control_appears(tmp_path: Path) -> None:
    plan = expand(parse_spec(MATRIX, "r.yaml"), "r.yaml")
    control, cell = plan.cells
    store = Store.open(tmp_path / "r.db")
    sweep = store.create_sweep("r", "r.yaml", MATRIX)
    for c in plan.cells:
        store.add_cell(sweep, c)
    run_id = store.record_run(sweep, outcome(cell.id, [1, 2, 3]))
    store.record_grade(run_id, Grade("ungraded", "control has not run"))
    store.record_run(sweep, outcome(control.id, [1, 2, 3]))

    grade_waiting(plan, store, [control.id, cell.id])
    assert store.latest_grade(run_id).verdict == "clean"
