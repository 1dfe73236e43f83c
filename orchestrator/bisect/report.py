"""What a bisect found, as values and plain text: the report, and the commits around the change."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vmatrix.cells import Cell
from vmatrix.orchestrator.bisect.commits import git
from vmatrix.orchestrator.bisect.predicate import Answer, Predicate
from vmatrix.orchestrator.bisect.search import SearchResult, Step

if TYPE_CHECKING:
    from vmatrix.db.records import BisectRecord


@dataclass
class BisectReport:
    mode: Literal["release", "commit"]
    distribution: str
    predicate: Predicate
    cell: Cell  # as selected on the older endpoint
    result: SearchResult
    wall_s: float
    continue_command: list[str] | None  # argv of the commit-level bisect to run next
    neighbours: list[Neighbour] = field(default_factory=list)  # commit mode: the commits around the change
    old_cell_id: str | None = None  # the cell on the oldest and the newest candidate
    new_cell_id: str | None = None

    @property
    def found(self) -> str:
        r = self.result
        what = "first good" if r.find_fix else "first bad"
        last = "last bad" if r.find_fix else "last good"
        unit = "release" if self.mode == "release" else "commit"
        text = f"{what} {unit}: {_short(r.first_new)} ({last}: {_short(r.last_old)})"
        if r.untested:
            text += f"; untested in between: {', '.join(map(_short, r.untested))} (the change may be in one of them)"
        return text


@dataclass(frozen=True)
class Neighbour:
    """One commit around the change, as ``git log`` shows it, with its part in the result."""

    commit: str
    subject: str
    role: str  # "last good", "first bad", "untested", "" (context), "last bad"/"first good" with find_fix
    answer: Answer | None  # how its step was judged; None: not tested


def neighbours(repo: Path, result: SearchResult, context: int = 1) -> list[Neighbour]:
    """The last old and first new commit, the untested ones between, and ``context`` more each side."""
    cands = result.candidates
    lo, hi = cands.index(result.last_old), cands.index(result.first_new)
    shown = cands[max(lo - context, 0): hi + context + 1]
    out = git(repo, "show", "-s", "--format=%H %s", *shown)
    subjects = dict(line.split(" ", 1) if " " in line else (line, "") for line in out.stdout.splitlines())
    answers = {s.candidate: s.answer for s in result.steps if s.answer != "skip"}
    old_role, new_role = ("last bad", "first good") if result.find_fix else ("last good", "first bad")
    roles = {result.last_old: old_role, result.first_new: new_role, **{c: "untested" for c in result.untested}}
    return [Neighbour(c, subjects.get(c, ""), roles.get(c, ""), answers.get(c)) for c in shown]


def _short(candidate: str) -> str:
    return candidate[:12] if re.fullmatch(r"[0-9a-f]{40}", candidate) else candidate



def step_json(step: Step) -> dict[str, Any]:
    """One step as the results DB keeps it (``bisects.steps``)."""
    obs = step.observation
    return {"number": step.number, "candidate": step.candidate, "answer": step.answer, "reason": step.reason,
            "status": obs.status, "verdict": obs.verdict, "signature": obs.signature, "run_id": obs.run_id,
            "reused": obs.reused, "seconds": obs.seconds, "unavailable": obs.unavailable}


def to_record(report: BisectReport, good: str, bad: str, source: str, repo: str | None = None) -> BisectRecord:
    """What ``report`` found, to be appended to the results DB (``Store.record_bisect``)."""
    from vmatrix.db.records import BisectRecord

    r = report.result
    return BisectRecord(
        mode=report.mode, distribution=report.distribution, good=good, bad=bad, find_fix=r.find_fix,
        predicate=report.predicate.text, candidates=list(r.candidates), steps=[step_json(s) for s in r.steps],
        source=source, wall_s=report.wall_s, old_cell_id=report.old_cell_id, new_cell_id=report.new_cell_id,
        last_old=r.last_old, first_new=r.first_new, untested=list(r.untested),
        neighbours=[{"commit": n.commit, "subject": n.subject, "role": n.role, "answer": n.answer}
                    for n in report.neighbours],
        repo=repo, continue_command=report.continue_command,
    )
