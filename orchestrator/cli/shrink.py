"""``vmatrix shrink CELL``: the smallest part of a corrupt cell's workload that still fails.

The view shows two rows while it runs: the search (level, probes asked, requests kept,
engine runs) and the engine run now going (its start phase from the log, requests answered),
and prints one line per probe as it is decided. Not on a terminal: lines only.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Self

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

from vmatrix.orchestrator.cli.common import DbOpt, console, fail, open_store
from vmatrix.orchestrator.paths import data_dir
from vmatrix.progress import REPLAY, Step

if TYPE_CHECKING:
    from vmatrix.orchestrator.shrink.probe import ProbeResult


class ShrinkView:
    """Rich rows for the search and the engine run; ``say``, ``step`` and ``probe`` are the
    shrink's listeners."""

    def __init__(self, out: Console, total: int) -> None:
        fit = Column(no_wrap=True, overflow="ellipsis", ratio=1)
        self.console = out
        self.bars = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False, table_column=fit),
                             BarColumn(bar_width=10), TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                             console=out, transient=False, expand=out.is_terminal)
        self.lines = not out.is_terminal
        self.total = total
        self.search = self.bars.add_task(f"shrink: {total} requests", total=total, completed=total, count="")
        self.engine = self.bars.add_task("engine: -", total=1, count="")
        self.probes = 0

    def __enter__(self) -> Self:
        self.bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.bars.stop()

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def say(self, text: str) -> None:
        self.bars.update(self.engine, description=text, total=1, completed=0, count="")
        if self.lines:
            self._print(text)

    def step(self, step: Step) -> None:
        count = f"{step.done}/{step.total}" if step.total is not None else ""
        what = "engine: requests answered" if step.step == REPLAY else f"engine: {step.detail}"
        self.bars.update(self.engine, description=what, total=step.total or 1, completed=step.done or 0, count=count)

    def probe(self, result: ProbeResult, kept: int) -> None:
        self.probes += 1
        verdicts = " ".join(result.verdicts) or "-"
        self._print(f"probe {self.probes} ({result.level}): {result.requests} requests -> "
                    f"{'FAILS' if result.fails else 'passes'} ({result.failures} corrupt of {len(result.verdicts)} "
                    f"run(s): {verdicts}; {result.ran} engine run(s), {result.reused} read back) cell "
                    f"{result.cell_id[:12]}")
        self.bars.update(self.search, description=f"shrink ({result.level}): {self.probes} probes, "
                                                  f"{kept} of {self.total} requests kept",
                         completed=kept, count=f"{kept}/{self.total}")


def shrink(
    cell: Annotated[str, typer.Argument(help="The corrupt cell, by id prefix (as `results show` takes it).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The matrix file of the minimal workload to "
                                                               "write (its trace beside it, .jsonl).")] = Path(
        "shrunk.yaml"),
    db: DbOpt = None,
    k: Annotated[int, typer.Option("--k", help="A probe fails when at least K of its runs are corrupt.")] = 2,
    n: Annotated[int, typer.Option("--n", help="Engine runs of a probe at most (fewer once K is reached or out "
                                               "of reach).")] = 3,
    levels: Annotated[str, typer.Option(help="Units to remove, coarse to fine, comma-separated: groups (phases "
                                             "sharing sessions), sessions, requests.")] = "groups,sessions,requests",
    max_probes: Annotated[int | None, typer.Option(help="Stop after this many probes, with the smallest "
                                                        "failing one found so far.")] = None,
    work: Annotated[Path | None, typer.Option(help="Folder for probe traces and engine logs (default: "
                                                   "the data dir's shrink/).")] = None,
) -> None:
    """Delta debugging over a corrupt cell's recorded requests: each probe runs the cell and its
    control on a part of them (real engines, recorded and graded like cells; a re-run reads
    them back), down to the smallest part still corrupt in K of N runs. Writes a matrix file of
    it and records the answer (`vmatrix results show CELL`)."""
    from vmatrix.orchestrator.recorded import load_recorded
    from vmatrix.orchestrator.shrink import LEVELS, Settings
    from vmatrix.orchestrator.shrink import shrink as run_shrink

    wanted = tuple(x.strip() for x in levels.split(",") if x.strip())
    if not wanted or any(x not in LEVELS for x in wanted):
        fail(f"--levels: '{levels}': a comma-separated list of {', '.join(LEVELS)}")
    if not 1 <= k <= n:
        fail(f"--k {k}: between 1 and --n ({n})")
    store = open_store(db, write=True)
    total = len(load_recorded(store, cell).workload.requests)
    with ShrinkView(console, total) as view:
        record = run_shrink(store, cell, Settings(k, n, wanted, max_probes), output, work or data_dir() / "shrink",
                            say=view.say, progress=view.step, on_probe=view.probe)
    probes = len(record.probes)
    if record.matrix_path:
        console.print(f"shrink {record.status}: {record.requests_after} of {record.requests_before} requests still "
                      f"corrupt in >= {record.k} of {record.n} runs (cell {record.result_cell_id}); {probes} probes, "
                      f"{record.engine_runs} engine runs ({record.reused_runs} recorded runs read back), "
                      f"{record.wall_s:.0f} s; wrote {record.matrix_path}", highlight=False, soft_wrap=True)
    else:
        console.print(f"shrink {record.status}: no probe failed in >= {record.k} of {record.n} runs; {probes} probes, "
                      f"{record.engine_runs} engine runs: nothing smaller than the recorded workload shown to fail",
                      highlight=False, soft_wrap=True)
