"""What a published site shows (`vmatrix publish`, db/site.py), as the templates read it:
sources (DBs and sweeps), stacks (the lookup table of releases x cells), the slots of a
square holding every result of it from every DB, a result's evidence, shapes, and bisect
pages. Values only: db/site.py builds them from the DBs' bulk reads in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from vmatrix.db.evidence import unmeasured_of
from vmatrix.db.queries import CellResult, GradeDetail
from vmatrix.db.reads import RecallCount
from vmatrix.db.records import BisectRecord, FixesRecord
from vmatrix.db.report import (
    RESULT_COLORS,
    BarChart,
    CellView,
    cell_view,
    legend,
)
from vmatrix.db.samples import RunSamples
from vmatrix.db.store import Store


@dataclass
class Source:
    """One results DB the site is built from."""

    number: int  # 1, 2, ... in the order given: "db 2" on a page
    name: str  # the file's name (not its folder: a page must not depend on where the DB lies), or the URL
    key: str  # for file names: the file's stem, made unique among the sources
    store: Store
    sweeps: dict[int, str]  # sweep id -> name
    cells: list[CellResult]
    recorded: Recorded
    workloads: dict[str, str]  # cell id -> workload name
    newest_run: float | None
    bisect_count: int = 0

    @property
    def label(self) -> str:
        return f"db {self.number}"

    def sweep_text(self, sweep: int | None) -> str:
        if sweep is None:
            return "no run"
        name = self.sweeps.get(sweep)
        return f"sweep {sweep}" + (f" ({name})" if name else "")


@dataclass
class Result:
    """One recorded result of a cell on a release, and the DB (and sweep) that recorded it."""

    view: CellView
    source: Source
    started_at: float | None
    finished_at: float | None
    also: list[Source] = field(default_factory=list)  # other DBs holding this very run (a copied DB)

    @property
    def result(self) -> str:
        return self.view.cell.result

    @property
    def sweep(self) -> int | None:
        return self.view.cell.run_sweep_id

    @property
    def origin(self) -> str:
        """``name.db, sweep 2 (its name)``: where a person finds this result."""
        text = f"{self.source.name}, {self.source.sweep_text(self.sweep)}"
        if self.view.cell.run_id is not None:
            text += f", run {self.view.cell.run_id}"
        return text

    @property
    def tag(self) -> str:
        """The short form for a square: ``db 2 · sweep 1``."""
        return f"{self.source.label} · sweep {self.sweep}" if self.sweep is not None else self.source.label

    @property
    def unmeasured(self) -> list[str]:
        """What the newest grade says it could not measure (its coverage's ``unmeasured``)."""
        return unmeasured_of(self.view.grade.evidence if self.view.grade else None)

    def recency(self) -> tuple[bool, float, float]:
        """Newest first: a run before none, then the latest finish, then the newest grade."""
        grade = self.view.grade
        return (self.view.cell.run_id is not None, self.finished_at or 0.0, grade.created_at if grade else 0.0)


@dataclass
class Slot:
    """One cell on one release: a square of the lookup table. Its results newest first:
    the first is the square's; the others are listed under it."""

    release: str
    results: list[Result] = field(default_factory=list)
    previous: str | None = None  # the release below with a result, if any
    change: str | None = None  # better / worse / changed, against that release
    bisects: list[BisectPage] = field(default_factory=list)  # between the two
    # `vmatrix fixes` searches about any of its results' cells, with the DB each is in.
    fixes: list[tuple[FixesRecord, Source]] = field(default_factory=list)

    @property
    def newest(self) -> Result:
        return self.results[0]

    @property
    def view(self) -> CellView:
        return self.newest.view

    @property
    def others(self) -> list[Result]:
        return self.results[1:]

    @property
    def result(self) -> str:
        return self.view.cell.result

    @property
    def mark(self) -> tuple[str, str] | None:
        return CHANGE_MARK.get(self.change) if self.change else None

    def settle(self) -> None:
        """Order the results newest first; fold one run that several DBs hold into one
        result; leave out a cell never run when the square has a result that ran."""
        same: dict[tuple[str, float | None, float | None, str], Result] = {}
        kept: list[Result] = []
        for r in sorted(self.results, key=Result.recency, reverse=True):
            if r.view.cell.run_id is None and kept:
                continue
            key = (r.view.cell.cell_id, r.started_at, r.finished_at, r.result)
            if r.view.cell.run_id is not None and key in same:
                same[key].also.append(r.source)
                continue
            same[key] = r
            kept.append(r)
        self.results = kept


@dataclass
class Evidence:
    """What the cell page shows for one result that is not clean."""

    release: str
    slot: Slot
    item: Result
    grade: GradeDetail | None
    first: dict[str, Any]
    where: str
    columns: list[tuple[str, str]]  # (cell | control | ground truth, text)
    coverage: list[str]
    unmeasured: list[str]
    evidence_json: str | None

    @property
    def anchor(self) -> str:
        """The section's id: the release, and the DB and run for a result other than the square's."""
        if self.item is self.slot.newest:
            return f"evidence-{self.release}"
        return f"evidence-{self.release}-{self.item.source.key}-{self.item.view.cell.run_id}"


@dataclass
class Shape:
    """A cell across releases: a column of a stack's table and a page of its own."""

    key: str
    stack: Stack
    label: str  # the knobs that vary within its stack
    knobs: str  # all its knobs
    control: bool
    label_lines: list[str] = field(default_factory=list)  # the label, a knob a line (a column's header)
    slots: dict[str, Slot] = field(default_factory=dict)  # release -> slot
    charts: list[BarChart] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.stack.title} · {self.knobs}"

    def rows(self) -> list[Slot]:
        """Its slots, newest release first."""
        return [self.slots[r] for r in self.stack.releases if r in self.slots]


@dataclass
class Stack:
    """One lookup table: an engine kind, model and workload; releases x cells."""

    key: str
    title: str
    releases: list[str] = field(default_factory=list)  # newest first
    shapes: list[Shape] = field(default_factory=list)
    shared: str = ""  # the knobs every cell of it sets alike (not at their defaults)
    sources: list[Source] = field(default_factory=list)  # the DBs its results come from

    @property
    def from_text(self) -> str:
        return ", ".join(f"{s.label} ({s.name})" for s in self.sources)


@dataclass
class BisectPage:
    record: BisectRecord
    source: Source
    name: str  # the page's file name, without .html
    old: Shape | None
    new: Shape | None
    range_url: str | None
    range_text: str | None

    @property
    def found(self) -> str:
        r = self.record
        if r.error:
            return f"no answer: {r.error}"
        unit = "release" if r.mode == "release" else "commit"
        first, last = ("first good", "last bad") if r.find_fix else ("first bad", "last good")
        text = f"{first} {unit}: {short(r.first_new)} ({last}: {short(r.last_old)})"
        if r.untested:
            text += f"; untested in between: {', '.join(map(short, r.untested))}"
        return text


@dataclass
class Site:
    stacks: list[Stack]
    bisects: list[BisectPage]
    counts: dict[str, int]  # each square's result (its newest)
    newest_run: float | None
    sources: list[Source] = field(default_factory=list)
    listed: int = 0  # results listed under a newer one in the same square
    result_colors: dict[str, str] = field(default_factory=lambda: dict(RESULT_COLORS))

    @property
    def several(self) -> bool:
        """Whether the pages name each result's DB (more than one DB published)."""
        return len(self.sources) > 1

    @property
    def legend(self) -> list[tuple[str, str]]:
        """What each result shown means, in the order of the counts."""
        return legend(self.counts)


CHANGE_MARK = {"better": ("▲", "better"), "worse": ("▼", "regressed"), "changed": ("◆", "changed")}


def release_of(version: str) -> Version | None:
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return None if v.local else v  # a commit build (0.30.0+g0123abc) is a bisect step, not a release


@dataclass
class Recorded:
    """What the runs of one DB's cells recorded, read in bulk once."""

    samples: dict[int, RunSamples]
    totals: dict[int, dict[str, float]]
    grades: dict[int, GradeDetail]
    recalls: dict[int, RecallCount]
    runs: dict[int, tuple[float, float]]  # run id -> (started_at, finished_at)

    def view(self, cell: CellResult, axes: list[str]) -> CellView:
        run = cell.run_id
        if run is None:
            return cell_view(cell, axes, RunSamples(), {}, None, None)
        return cell_view(cell, axes, self.samples.get(run, RunSamples()), self.totals.get(run, {}),
                         self.grades.get(run), self.recalls.get(run))


def short(candidate: str | None) -> str:
    if candidate is None:
        return "-"
    return candidate[:12] if len(candidate) == 40 and all(c in "0123456789abcdef" for c in candidate) else candidate
