"""What a bisect found, as values and plain text: the report, and the commits around the change."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.bisect.commits import git
from orchestrator.bisect.predicate import Answer, Predicate
from orchestrator.bisect.search import SearchResult
from vmatrix.cells import Cell


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

