"""A recorded cell as `vmatrix repro` and `vmatrix shrink` start from it: the cell, its
control, the run picked, and the exact requests that run replayed.

A shaped workload's requests are not stored; they are rebuilt from the cell's workload
spec on the block and by the builders' version its run recorded (as a regrade does), and
checked against the digest the run recorded of what it sent: a rebuild that sent other
prompts is an error, never a silent approximation.
"""

from __future__ import annotations

from dataclasses import dataclass

from vmatrix.cells import Cell
from vmatrix.db.queries import resolve_cell_id
from vmatrix.db.store import Store
from vmatrix.errors import NotFoundError
from vmatrix.jobs.workload import build_workload, requests_digest, workload_digest
from vmatrix.orchestrator.spec.workload import workload_spec
from vmatrix.records import Layout
from vmatrix.workload import Workload


@dataclass(frozen=True)
class Recorded:
    cell: Cell
    control: Cell
    run_id: int
    verdict: str | None  # the run's newest grade; None: not graded
    summary: str
    evidence: dict
    workload: Workload  # the requests the run sent, in its phases
    layout: Layout | None


def load_recorded(store: Store, cell_ref: str, run_id: int | None = None) -> Recorded:
    """The cell a prefix names (as `results show` takes it) with its newest ok run (or
    ``run_id``), and that run's requests. A control has nothing to reproduce against."""
    cell_id = resolve_cell_id(store, cell_ref)
    data = store.cell_spec(cell_id)
    assert data is not None
    cell = Cell.from_json(data)
    if cell.control_id is None:
        raise NotFoundError(f"cell {cell_id}: a control; give a cell that is graded against one")
    control_data = store.cell_spec(cell.control_id)
    if control_data is None:
        raise NotFoundError(f"cell {cell_id}: its control {cell.control_id} is not in this database")
    if run_id is None:
        runs = store.ok_runs(cell_id, limit=1)
        if not runs:
            raise NotFoundError(f"cell {cell_id}: no run that finished ok (crashed and refused starts have no answers "
                                "to compare)")
        run = runs[0]
    else:
        run = store.run(run_id)
        if run.cell_id != cell_id:
            raise NotFoundError(f"run {run_id}: a run of cell {run.cell_id}, not of {cell_id}")
    grade = store.latest_grade(run.id)
    layout = Layout.from_json(run.layout)
    return Recorded(cell, Cell.from_json(control_data), run.id, grade.verdict if grade else None,
                    grade.summary if grade else "", dict(grade.evidence) if grade else {},
                    replayed_workload(cell, layout), layout)


def replayed_workload(cell: Cell, layout: Layout | None) -> Workload:
    """The workload a run of ``cell`` laid out as ``layout`` replayed, checked against what
    the run recorded of it (shaped: its requests digest; otherwise: the cell's digest)."""
    spec = workload_spec(cell)
    if spec.shapes is None:
        if workload_digest(spec) != cell.workload_digest:
            raise NotFoundError(f"cell {cell.id}: workload {spec.name!r} reads other requests now than it recorded "
                                f"(the trace file {spec.trace!r} changed?)")
        return build_workload(spec)
    if layout is None or layout.block_tokens is None:
        raise NotFoundError(f"cell {cell.id}: its run recorded no layout, so the shaped requests it sent are not known")
    workload = build_workload(spec, layout.block_tokens, layout.layout_version)
    if layout.requests_digest is not None and requests_digest(workload) != layout.requests_digest:
        raise NotFoundError(f"cell {cell.id}: its requests, rebuilt on {layout.block_tokens}-token blocks by layout "
                            f"{layout.layout_version}, are not the ones the run recorded")
    return workload
