"""``vmatrix results regrade SWEEP``: grade a sweep's recorded runs again, no engine started.

When the grader learns something (a symptom detector, a better rule for tie flips),
the runs already recorded can be judged by it. New grades are appended: the old
ones stay on record, and every query reads a run's newest grade.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.table import Table

from vmatrix.cells import Cell
from vmatrix.orchestrator.cli.common import DbOpt, console, fail, open_store


def recorded_cell(spec: dict[str, Any] | None) -> Cell | None:
    """A cell as its row recorded it, for runs whose matrix now expands to other ids (the
    workload builder changed, say): grading needs its knobs, workload and model, not a
    matching id. A canary is read from this checkout, where its recorded path may not exist."""
    # Imported here: orchestrator.plan.canary pulls in the matrix spec (pydantic, ~0.15 s), and
    # every `vmatrix` command imports this module; `results compare` and `table` must not pay it.
    from vmatrix.orchestrator.plan.canary import canary_dir, is_canary

    if spec is None:
        return None
    cell = Cell.from_json(spec)
    if is_canary(cell.model.name):
        cell = replace(cell, model=replace(cell.model, path=str(canary_dir(cell.model.name.removeprefix("canary:")))))
    return cell


def results_regrade(
    sweep: Annotated[int, typer.Argument(help="The sweep whose runs are graded again.")],
    db: DbOpt = None,
) -> None:
    """Grade SWEEP's runs again with the current grader and the sweep's own grading settings."""
    from vmatrix.db.queries import sweep_info, sweep_runs
    from vmatrix.errors import SpecError
    from vmatrix.orchestrator.plan.canary import CanaryError
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.grading import regrade_run

    store = open_store(db, write=True)
    try:
        info = sweep_info(store, sweep)
    except LookupError as exc:
        fail(f"--sweep: {exc}")
    try:
        plan = expand(parse_spec(info.spec_text, info.spec_path), info.spec_path)
    except (SpecError, CanaryError) as exc:
        fail(f"sweep {sweep}: its matrix no longer expands here: {exc}")
    cells = {c.id: c for c in plan.cells}
    table = Table(title=f"sweep {sweep} regraded (new grades appended)")
    for col in ("run", "cell", "engine", "before", "after", "summary"):
        table.add_column(col)
    regraded = 0
    for run_id, cell_id, status in sweep_runs(store, sweep):
        cell = cells.get(cell_id) or recorded_cell(store.cell_spec(cell_id))
        if cell is None or cell.is_control or status != "ok":
            continue
        old = store.latest_grade(run_id)
        grade = regrade_run(store, cell, store.run(run_id), plan.spec.grading, sweep)
        regraded += 1
        table.add_row(str(run_id), cell_id[:8], cell.engine.label, old.verdict if old else "-", grade.verdict,
                      grade.summary)
    if not regraded:
        fail(f"sweep {sweep} has no successful non-control runs to grade")
    console.print(table)
