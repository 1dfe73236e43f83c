"""``vmatrix watch MATRIX``: run each new release of the matrix's ranges, bisect what changed.

The decisions are the library's (``orchestrator/watch.py``); here the sweeps and bisects
it asks for run with the progress views `sweep run` and `bisect` have, and a pass is
said in lines. ``--once`` is one pass; without it a pass every ``--every``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from vmatrix.errors import VmatrixError
from vmatrix.orchestrator.cli.common import DbOpt, IndexOpt, console, err, error_line, fail, open_store, use_index
from vmatrix.orchestrator.paths import runs_dir

if TYPE_CHECKING:
    from vmatrix.orchestrator.watch import WatchReport

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
pause = time.sleep  # between passes; tests wait less


def parse_every(text: str) -> float:
    """``90s``, ``30m``, ``6h``, ``1d`` (or a sum: ``1h30m``) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip().replace(" ", ""):
        fail(f"--every: '{text}' is not a duration such as 30m, 6h or 1d")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 60:
        fail(f"--every: '{text}' is under a minute; the index is not asked that often")
    return seconds


def _said(report: WatchReport) -> None:
    if report.nothing_new:
        console.print(report.quiet_line(), highlight=False, soft_wrap=True)
        return
    if report.new:
        console.print(f"ran {report.ran} cell(s) of {', '.join(report.new)} (sweep {report.sweep_id})",
                      highlight=False)
    if report.bisected:  # each was said as it was answered
        ids = ", ".join(str(i) for _, i in report.bisected)
        console.print(f"{len({c.cell.id for c, _ in report.bisected})} verdict change(s) bisected (bisect {ids})",
                      highlight=False)
    for change in report.unranked:
        console.print(Text.assemble(change.line(), ("  not bisected: the verdicts say nothing about the release",
                                                    "dim")), soft_wrap=True)
    quiet = len(report.changes) - len(report.unranked) - len({c.cell.id for c, _ in report.bisected})
    if quiet:
        console.print(f"{quiet} earlier change(s) were bisected by an earlier pass", style="dim")
    console.print("see them all: vmatrix publish DIR", style="dim")


def watch(
    matrix: Annotated[Path, typer.Argument(help="A matrix whose engines name release ranges or `latest`.")],
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
    every: Annotated[str, typer.Option("--every", help="Without --once: the time between passes (30m, 6h, 1d).")]
    = "6h",
    db: DbOpt = None,
    index_url: IndexOpt = None,
    address: Annotated[str | None, typer.Option(help="Join this Ray cluster instead of starting one.")] = None,
    progress: Annotated[bool, typer.Option(help="Show each long step as it goes (as `sweep run` does); "
                                                "not on a terminal: one line per step.")] = True,
) -> None:
    """Run the releases of MATRIX's ranges the results DB has no runs of, grade them, and
    bisect every cell whose verdict changed from the previous release's (--find-fix when it
    got better). A pass with nothing new does nothing and says so in one line; a killed
    watch resumes where it stopped."""
    from vmatrix.orchestrator.bisect import run_bisect
    from vmatrix.orchestrator.cli.bisect import BisectProgress
    from vmatrix.orchestrator.cli.sweep_view import SweepView
    from vmatrix.orchestrator.plan.matrix import describe_knobs
    from vmatrix.orchestrator.sweep.scheduler import run_sweep
    from vmatrix.orchestrator.watch import Hooks, watch_once

    interval = parse_every(every)
    if not matrix.is_file():
        fail(f"{matrix}: no such matrix file")
    use_index(index_url)
    store = open_store(db, write=True)

    def sweep(plan, sweep_id):
        labels = {c.id: f"{c.engine.label} [{describe_knobs(c.knobs)}]" for c in plan.cells}
        with SweepView(console, labels, lines=progress) as view:
            return run_sweep(plan, store, sweep_id, runs_dir(), address=address, listener=view.phase,
                             progress=view.step if progress else None)

    def bisect(req, spec, on_step):
        view = BisectProgress()
        console.print(f"bisecting {req.cell}: good {req.good}, bad {req.bad}, `{req.predicate}`"
                      + (" (--find-fix)" if req.find_fix else ""), highlight=False, soft_wrap=True)

        def step(s) -> None:
            on_step(s)
            view.on_step(s)

        try:
            return run_bisect(req, store, runs_dir(), address=address, spec=spec, on_phase=view.on_phase,
                              on_start=view.on_start, on_step=step)
        finally:
            view.stop()

    # Lines quote knobs ("[spec=mtp:2]") and signatures: text, never markup.
    hooks = Hooks(say=lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True), sweep=sweep,
                  bisect=bisect)
    while True:
        try:
            _said(watch_once(matrix, store, hooks))
        except VmatrixError as exc:
            if once:
                raise
            # The index or a build may be back at the next pass: the watch keeps going.
            err.print(f"error: {error_line(exc)}", highlight=False, soft_wrap=True)
        except KeyboardInterrupt:
            err.print("stopped: finished cells and bisects are stored; run it again to resume", soft_wrap=True)
            raise typer.Exit(130) from None
        if once:
            return
        at = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() + interval))
        console.print(f"next pass at {at} (--every {every})", style="dim")
        try:
            pause(interval)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
