"""What `vmatrix sweep run` shows while a sweep runs: one row per cell, its phase and its
long step (vmatrix.progress), Rich bars on a terminal, plain lines anywhere else.

Kept apart from ``app.py`` so the display is tested without a sweep
(tests/test_progress.py feeds it the phases and steps a sweep sends).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from vmatrix.progress import REPLAY, SETUP, Step


class SweepView:
    """Rows for ``labels`` (cell id -> text); :meth:`phase` and :meth:`step` are the
    sweep's listener and progress listener.

    On a terminal the rows are Rich bars. Anywhere else (CI, a pipe) Rich draws only the
    final rows, so with ``lines`` each phase and each new step or detail is printed as a
    line as it comes (never one per count: a replay prints its start and its end).
    """

    def __init__(self, console: Console, labels: dict[str, str], lines: bool) -> None:
        # markup off: a cell's label has its knobs in [brackets], which Rich took for a style
        # tag and dropped; an engine's or uv's line may hold brackets too.
        # The label and the step share what the bar, count and clock leave, each cut with
        # "…" rather than wrapped: at 80 columns a row stays one line and keeps its bar.
        fit = {"no_wrap": True, "overflow": "ellipsis", "ratio": 1}
        columns = (SpinnerColumn(), TextColumn("{task.fields[cell]}", markup=False, table_column=Column(**fit)),
                   TextColumn("{task.description}", markup=False, table_column=Column(**fit)),
                   BarColumn(bar_width=10), TextColumn("{task.fields[count]}", table_column=Column(no_wrap=True)),
                   TimeElapsedColumn())
        self.console = console
        # Not on a terminal only the final rows are drawn, at their natural width as before.
        self.bars = Progress(*columns, console=console, transient=False, expand=console.is_terminal)
        self.lines = lines and not console.is_terminal
        self.tasks: dict[str, TaskID] = {cid: self.bars.add_task("queued", total=1, cell=f"{cid[:8]} {label}", count="")
                                         for cid, label in labels.items()}
        self._printed: dict[str, str] = {}
        self._counting: set[str] = set()  # cells whose bar counts replayed requests

    def __enter__(self) -> Self:
        self.bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.bars.stop()

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def phase(self, cell_id: str, phase: str) -> None:
        done = phase.startswith(("graded", "skipped"))
        task = self.tasks[cell_id]
        if cell_id in self._counting and phase.startswith("replaying "):
            self.bars.update(task, description=phase)  # the next phase of the replay: keep its count
        else:
            self._counting.discard(cell_id)
            self.bars.update(task, description=phase, total=1, completed=1 if done else 0, count="")
        if done:
            self.bars.stop_task(task)
        if self.lines:
            self._print(f"{cell_id[:8]} {phase}")

    def step(self, cell_id: str, step: Step) -> None:
        if cell_id == SETUP and SETUP not in self.tasks:  # the setup's row appears when it has something to say
            self.tasks[SETUP] = self.bars.add_task("", total=1, cell="setup", count="")
        count = f"{step.done}/{step.total}" if step.total is not None else ""
        # A replay's row keeps its phase ("replaying turn-2"); the bar counts the requests.
        if step.step == REPLAY:
            self._counting.add(cell_id)
            self.bars.update(self.tasks[cell_id], total=step.total or 1, completed=step.done or 0, count=count)
        else:
            self.bars.update(self.tasks[cell_id], description=f"{step.step}: {step.detail}", total=step.total or 1,
                             completed=step.done or 0, count=count)
        if self.lines and (self._printed.get(cell_id) != step.detail or step.finished):
            self._printed[cell_id] = step.detail
            self._print(f"{cell_id[:8] or 'setup'} {step.line()}")
