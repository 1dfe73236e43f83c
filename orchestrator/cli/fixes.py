"""``vmatrix fixes CELL --candidate SET ...``: which patch set turns a corrupt cell clean.

Registered on the main app with one line, like ``bisect``. Every candidate's run is a
stored cell run, so an interrupted search resumes by running the same command again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from vmatrix.orchestrator.cli.common import DB_HELP, console, err, fail, open_store
from vmatrix.orchestrator.paths import runs_dir


def fixes(
    cell: str = typer.Argument(..., help="A recorded cell (id prefix) whose newest result is corrupt or crashed."),
    candidate: list[str] = typer.Option(
        ..., "--candidate",
        help="A patch set's name (its variant for the cell's release), or a .patch/.diff file or URL; repeat it. "
             "Each is added after the cell's own patches; 'a+b' is one candidate, set a then set b."),
    together: bool = typer.Option(False, "--together", help="Also all candidates at once, in the order given."),
    matrix: Path | None = typer.Option(
        None, "--matrix", help="The matrix file the cell ran from; default: the text its newest run's sweep stored."),
    any_verdict: bool = typer.Option(False, "--any-verdict", help="Try the candidates on a cell that is not "
                                     "corrupt or crashed too."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    address: str | None = typer.Option(None, "--address", help="Join this Ray cluster instead of starting one."),
) -> None:
    """Run CELL on its release with each candidate patch set (and, with --together, all of them),
    each graded against the cell's own control; print and store what each did."""
    from vmatrix.orchestrator.cli.fixes_view import render_fixes
    from vmatrix.orchestrator.fixes import find_fixes

    store = open_store(db, write=True)

    def say(label: str, phase: str) -> None:
        console.print(Text.assemble((f"{label[:40]}: ", "bold"), phase[:160]), highlight=False)

    try:
        result = find_fixes(store, cell, candidate, runs_dir(), together=together, matrix=matrix, address=address,
                            listener=say, any_verdict=any_verdict)
    except KeyboardInterrupt:
        err.print("interrupted: finished candidates are stored; run the same command again to resume", soft_wrap=True)
        raise typer.Exit(130) from None
    except Exception as exc:
        if not type(exc).__module__.startswith("ray."):
            raise
        fail(f"Ray failed during a candidate ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
             "finished candidates are stored: run the same command again to resume")
        return
    # Piped (CI, a file) the table keeps its natural width rather than 80 columns of folded words.
    out = console if console.is_terminal else Console(file=sys.stdout, width=400, color_system=None)
    out.print(render_fixes(result.record))
    console.print(f"recorded as fixes {result.fixes_id} ({result.record.wall_s:.0f} s)", style="dim")
