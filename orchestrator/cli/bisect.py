"""``vmatrix bisect``: find the release (or commit) where one cell's behaviour changed.

Kept apart from app.py so the command can be registered on the main app with one line
(``app.command("bisect")(bisect)``). Every step is a stored cell run, so an
interrupted bisect is resumed by running the same command again.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from vmatrix.orchestrator.cli.common import DB_HELP, console, err, error_line, fail, open_store
from vmatrix.orchestrator.paths import runs_dir

# orchestrator.bisect.predicate.DEFAULT, spelled here so that --help loads no bisect
# machinery (tests/test_bisect.py holds the two equal).
DEFAULT_PREDICATE = "verdict >= degraded"

if TYPE_CHECKING:  # imported by the command: loading the bisect machinery slows every other command
    from vmatrix.orchestrator.bisect import BisectReport, Step

ANSWER_STYLE = {"good": "green", "bad": "red", "skip": "yellow"}


def _outcome(step: Step) -> str:
    obs = step.observation
    if obs.unavailable:
        return "not run"
    if obs.verdict and obs.verdict != obs.status:
        return obs.verdict if obs.status == "ok" else f"{obs.verdict} ({obs.status})"
    return obs.status or "-"


def steps_table(report: BisectReport) -> Table:
    """The steps in evaluation order: what each version did and how it was judged."""
    table = Table(title=f"bisect steps ({report.distribution if report.mode == 'release' else 'commits'})")
    for col in ("step", "version" if report.mode == "release" else "commit", "verdict / status", "answer", "run",
                "seconds", "why"):
        table.add_column(col, overflow="fold")
    for step in report.result.steps:
        obs = step.observation
        run = "-" if obs.run_id is None else f"{obs.run_id}{' (reused)' if obs.reused else ''}"
        secs = "-" if obs.seconds is None else f"{obs.seconds:.0f}"
        table.add_row(str(step.number), step.candidate[:12], _outcome(step),
                      Text(step.answer, style=ANSWER_STYLE[step.answer]), run, secs, Text(step.reason[:100]))
    return table


def neighbours_table(report: BisectReport) -> Table:
    """Commit mode: the commits around the change, first-parent order, as git shows them."""
    table = Table(title="around the change (first-parent, oldest first)", show_edge=False)
    for col in ("commit", "", "answer", "subject"):
        table.add_column(col, overflow="fold")
    for n in report.neighbours:
        answer = Text(n.answer, style=ANSWER_STYLE[n.answer]) if n.answer else Text("-", style="dim")
        table.add_row(n.commit[:12], Text(n.role, style="bold" if n.role else ""), answer, n.subject[:80])
    return table


class BisectProgress:
    """A bisect as it goes: a spinner with the step under way and its engine's phase (started
    by the first step only: input errors print their one line and nothing else), and one
    line per finished step. `vmatrix watch` shows its bisects the same way."""

    def __init__(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (SpinnerColumn(), TextColumn("{task.description}"), TextColumn("[dim]{task.fields[phase]}"),
                   TimeElapsedColumn())
        self.progress = Progress(*columns, console=console, transient=True)
        self.task = self.progress.add_task("", phase="", start=False)

    def on_start(self, candidate: str, left: int) -> None:
        if not self.progress.live.is_started:
            self.progress.start()
            self.progress.start_task(self.task)
        self.progress.update(self.task, description=f"testing {candidate[:40]}: at most {left} step(s) left",
                             phase="")

    def on_phase(self, text: str) -> None:
        self.progress.update(self.task, phase=text[:80])

    def on_step(self, step: Step) -> None:
        run = f"run {step.observation.run_id}" if step.observation.run_id else "no run"
        reused = ", reused" if step.observation.reused else ""
        console.print(Text.assemble(f"step {step.number}: {step.candidate[:12]} ",
                                    (step.answer, ANSWER_STYLE[step.answer]),
                                    f" ({step.reason[:100]}; {run}{reused})"))

    def stop(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


def bisect(
    matrix: Path = typer.Option(..., "--matrix", help="The matrix file whose cell to bisect."),
    cell: str = typer.Option(..., "--cell", help="Knob filters naming one cell: prefix_caching=on,speculative=mtp"),
    good: str = typer.Option(..., "--good", help="A release (or, with --repo, a tag/commit) that behaves well."),
    bad: str = typer.Option(..., "--bad", help="A release (or tag/commit) that shows the problem."),
    predicate: str = typer.Option(
        DEFAULT_PREDICATE, "--predicate",
        help="What is bad: `verdict >= degraded` (worse than right answers; a `partial` is not bad, an "
             "`unexercised` step is skipped), `verdict != clean`, `status == crashed`, `decode_tps < 0.9 * good`."),
    repo: Path | None = typer.Option(None, "--repo", help="A local vLLM clone: bisect commits between the tags."),
    wheel_url: str | None = typer.Option(
        None, "--wheel-url",
        help="Per-commit wheel: a URL or path template with {commit} (and {version}: the commit's newest "
             "release tag), or a wheelhouse folder. Default: vLLM's per-commit CUDA wheel."),
    find_fix: bool = typer.Option(False, "--find-fix", help="Find the first good version after a bad one."),
    pre: bool = typer.Option(False, "--pre", help="Include pre-releases between the ends."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    address: str | None = typer.Option(None, "--address", help="Join this Ray cluster instead of starting one."),
) -> None:
    """Bisect one cell of MATRIX between two vLLM releases (or commits, with --repo)."""
    from vmatrix.orchestrator.bisect import BisectError, BisectRequest, run_bisect

    req = BisectRequest(matrix=matrix, cell=cell, good=good, bad=bad, predicate=predicate, repo=repo,
                        wheel_url=wheel_url, find_fix=find_fix, pre=pre, db=db)
    if not matrix.is_file():
        fail(f"{matrix}: no such matrix file")
    store = open_store(db, write=True)
    progress = BisectProgress()
    stop = progress.stop
    try:
        report = run_bisect(req, store, runs_dir(), address=address, on_phase=progress.on_phase,
                            on_start=progress.on_start, on_step=progress.on_step)
    except BisectError as exc:
        stop()
        fail(error_line(exc))
        return
    except KeyboardInterrupt:
        stop()
        err.print("interrupted: finished steps are stored; run the same command again to resume", soft_wrap=True)
        raise typer.Exit(130) from None
    except Exception as exc:
        # Ray itself failing under a step (e.g. its processes were stopped) is not the
        # stack's result; say so in one line, since the finished steps are kept.
        if not type(exc).__module__.startswith("ray."):
            raise
        stop()
        fail(f"Ray failed during a step ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
              "finished steps are stored: run the same command again to resume")
        return
    stop()

    console.print(steps_table(report))
    result = report.result
    console.print(Text(report.found, style="bold"))
    not_run = len(result.steps) - result.engine_steps - result.reused_steps
    console.print(f"{len(result.steps)} steps over {len(result.candidates)} candidates "
                  f"(bound ceil(log2 n) + 2 = {result.max_steps}); {result.engine_steps} ran engines now, "
                  f"{result.reused_steps} reused from the results DB"
                  + (f", {not_run} could not run (skipped)" if not_run else "") + f"; {report.wall_s:.0f} s")
    if report.neighbours:
        console.print(neighbours_table(report))
    if report.continue_command:
        console.print("continue at commit level (in a vLLM clone):")
        console.print(Text("  " + shlex.join(report.continue_command)), soft_wrap=True)
    # Beside the cells it bisected, for `vmatrix publish` (a bisect page) and `vmatrix watch`.
    from vmatrix.orchestrator.bisect.report import to_record

    recorded = store.record_bisect(to_record(report, good, bad, "bisect", str(repo) if repo else None))
    console.print(f"recorded as bisect {recorded}", style="dim")
