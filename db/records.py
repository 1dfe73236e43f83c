"""What the results DB keeps of a bisect, a `vmatrix fixes` search and a shrink, as the
values their writers append (db/store.py) and their views read; and the values the store's
grading reads return."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from vmatrix.db.models import (
    BisectRow,
    FixesRow,
    Run,
    ShrinkRow,
)
from vmatrix.records import Transcript

if TYPE_CHECKING:
    from vmatrix.jobs.noise import NoiseFloor


@dataclass(frozen=True)
class BisectRecord:
    """What a bisect found, as the results DB keeps it (``bisects``; ``db/models.BisectRow``)."""

    mode: str  # "release" or "commit"
    distribution: str
    good: str
    bad: str
    find_fix: bool
    predicate: str
    candidates: list[str]
    steps: list[dict[str, Any]]  # in evaluation order
    source: str  # "watch" or "bisect"
    wall_s: float
    old_cell_id: str | None = None
    new_cell_id: str | None = None
    last_old: str | None = None  # None with an error
    first_new: str | None = None
    untested: list[str] = field(default_factory=list)
    neighbours: list[dict[str, Any]] = field(default_factory=list)
    repo: str | None = None
    continue_command: list[str] | None = None
    error: str | None = None
    id: int | None = None  # set when read back
    created_at: float | None = None

    @classmethod
    def from_row(cls, row: BisectRow) -> BisectRecord:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class FixesRecord:
    """What ``vmatrix fixes`` found for a cell, as the results DB keeps it (``fixes``;
    ``db/models.FixesRow``). ``rows``: the cell as recorded first, then each candidate (see
    ``orchestrator/fixes.py``, ``FixRow``)."""

    cell_id: str
    control_id: str | None
    engine_label: str
    release: str
    candidates: list[str]
    together: bool
    rows: list[dict[str, Any]]
    answer: str
    wall_s: float
    sweep_id: int | None = None
    id: int | None = None  # set when read back
    created_at: float | None = None

    @classmethod
    def from_row(cls, row: FixesRow) -> FixesRecord:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class ShrinkRecord:
    """What a shrink found, as the results DB keeps it (``shrinks``; ``db/models.ShrinkRow``)."""

    cell_id: str
    run_id: int
    k: int
    n: int
    predicate: str
    levels: list[str]
    status: str  # done | stopped | error
    requests_before: int
    requests_after: int
    kept: list[str]
    probes: list[dict[str, Any]]
    engine_runs: int
    reused_runs: int
    wall_s: float
    result_cell_id: str | None = None
    matrix_path: str | None = None
    matrix_text: str | None = None
    error: str | None = None
    id: int | None = None  # set when read back
    created_at: float | None = None

    @classmethod
    def from_row(cls, row: ShrinkRow) -> ShrinkRecord:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class GradingRead:
    """What grading one cell reads from the store, in one session (:meth:`Store.grading_read`):
    its control's run (the newest ok one that sent the cell's requests, else
    :meth:`Store.control_run`'s), that run's transcript when it finished ok, the noise floor the
    sweep measured for the control, and the newest run of the cell's sibling without
    speculative decoding with its transcript (vLLM issue 45238's finding reads its hits)."""

    control: Run | None = None
    control_transcript: Transcript | None = None
    floor: NoiseFloor | None = None
    sibling: Run | None = None
    sibling_transcript: Transcript | None = None


@dataclass(frozen=True)
class CellStanding:
    """Where a cell stands in the store when a sweep plans its runs and late grades
    (:meth:`Store.standings`): its newest run, that run's newest verdict, how many runs
    finished ok (up to two: a noise floor's pair), and whether the sweep has measured its
    noise floor (a control's)."""

    latest: Run | None = None
    verdict: str | None = None
    ok_count: int = 0
    has_floor: bool = False
