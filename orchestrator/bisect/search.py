"""The search itself, engine-free: endpoints first, then a binary search with skips.

:func:`search` knows nothing about engines: it is handed an evaluator that turns
candidates into :class:`Observation` values, and a :class:`Predicate` that judges each
one good, bad or skip. That keeps the algorithm testable with a fake evaluator, and
lets release mode and commit mode share it.

Step budget: the two endpoints are checked first (as mozregression does, so a bisect
never "finds" a change between two versions that behave alike), then a binary
search over the ``n`` candidates needs at most ``ceil(log2(n - 1))`` more steps; so at
most ``ceil(log2(n)) + 2`` evaluations when no step is skipped. A skipped step
answers nothing and costs one extra evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vmatrix.orchestrator.bisect.errors import BisectError, BisectInputError
from vmatrix.orchestrator.bisect.predicate import Answer, Observation, Predicate


@dataclass(frozen=True)
class Step:
    number: int  # 1-based, in evaluation order
    index: int  # position among the candidates (oldest first)
    candidate: str
    answer: Answer
    reason: str
    observation: Observation


@dataclass
class SearchResult:
    candidates: list[str]  # oldest first
    find_fix: bool
    last_old: str  # last good (or, with find_fix, last bad)
    first_new: str  # first bad (or, with find_fix, first good)
    untested: list[str]  # skipped candidates between the two: the change may be in any of them
    steps: list[Step]

    @property
    def max_steps(self) -> int:
        return max_steps(len(self.candidates))

    @property
    def engine_steps(self) -> int:
        """Steps that started engines in this invocation (not from the DB, not skipped before a run)."""
        return sum(1 for s in self.steps if s.observation.run_id is not None and not s.observation.reused)

    @property
    def reused_steps(self) -> int:
        return sum(1 for s in self.steps if s.observation.reused)


def max_steps(n: int) -> int:
    """The promise: both endpoints plus a binary search over ``n`` candidates."""
    return math.ceil(math.log2(n)) + 2 if n > 1 else 2


def _remaining(gaps: int) -> int:
    """Evaluations still needed, worst case, for an interval with ``gaps`` gaps."""
    return math.ceil(math.log2(gaps)) if gaps > 1 else 0


def pick(lo: int, hi: int, skipped: set[int], ready: Callable[[int], bool] | None = None) -> int | None:
    """Next index to test strictly between ``lo`` and ``hi``, or None if none is left.

    Among the indices whose worst case still meets the log2 bound (the exact middle and,
    when the interval is not a power of two, some neighbours), prefer one whose engine
    environment is already built (mozregression does the same with downloaded builds),
    then the one nearest the middle. Skipped indices are never picked again, so a skip
    moves the search to a neighbour.
    """
    options = [k for k in range(lo + 1, hi) if k not in skipped]
    if not options:
        return None
    cost = {k: _remaining(max(k - lo, hi - k)) for k in options}
    best = min(cost.values())
    middle = (lo + hi) / 2
    tied = [k for k in options if cost[k] == best]
    return min(tied, key=lambda k: (not (ready and ready(k)), abs(k - middle), k))


Evaluate = Callable[[list[str]], list[Observation]]
StepListener = Callable[[str, int], None]  # (candidate, steps left at most) before a step
StepDone = Callable[[Step], None]


def search(
    candidates: Sequence[str],
    evaluate: Evaluate,
    predicate: Predicate,
    *,
    find_fix: bool = False,
    ready: Callable[[str], bool] | None = None,
    prefetch: Callable[[list[str]], None] | None = None,
    on_start: StepListener | None = None,
    on_step: StepDone | None = None,
) -> SearchResult:
    """Find where the predicate flips between ``candidates[0]`` and ``candidates[-1]``.

    ``candidates`` are oldest first. Without ``find_fix`` the oldest must be good and
    the newest bad, and the result is the first bad one; with ``find_fix`` the oldest
    must be bad and the newest good, and the result is the first good one.
    """
    cands = list(candidates)
    if len(cands) < 2:
        raise BisectError("need at least two versions to bisect")
    old_answer: Answer = "bad" if find_fix else "good"
    new_answer: Answer = "good" if find_fix else "bad"
    steps: list[Step] = []
    start_cb = on_start or (lambda c, left: None)

    def record(index: int, obs: Observation, answer: Answer, reason: str) -> Step:
        step = Step(len(steps) + 1, index, cands[index], answer, reason, obs)
        steps.append(step)
        if on_step:
            on_step(step)
        return step

    # Endpoints first, in one batch (they can run side by side).
    lo, hi = 0, len(cands) - 1
    start_cb(f"{cands[lo]} and {cands[hi]} (endpoints)", 2 + _remaining(hi - lo))
    if prefetch:
        first = pick(lo, hi, set())
        if first is not None:
            prefetch([cands[first]])
    obs_lo, obs_hi = evaluate([cands[lo], cands[hi]])
    good_obs = obs_hi if find_fix else obs_lo
    good_ref = good_obs.metrics.get(predicate.metric) if predicate.metric else None
    ans_lo, why_lo = predicate.judge(obs_lo, good_ref)
    ans_hi, why_hi = predicate.judge(obs_hi, good_ref)
    record(lo, obs_lo, ans_lo, why_lo)
    record(hi, obs_hi, ans_hi, why_hi)
    for index, answer, why, want in ((lo, ans_lo, why_lo, old_answer), (hi, ans_hi, why_hi, new_answer)):
        role = ("bad" if find_fix else "good") if index == lo else ("good" if find_fix else "bad")
        if answer == "skip":
            raise BisectInputError("the {role} end {end} could not be tested ({why}); pick another {" + role + "}",
                                   role=role, end=cands[index], why=why)
        if answer != want:
            further = "an older" if index == lo else "a newer"
            raise BisectInputError(
                "the {role} end {end} is actually {answer} ({why}; predicate `{text}`): "
                "the ends behave alike; pick {further} {" + role + "} or check {cell}/{predicate}",
                role=role, end=cands[index], answer=answer, why=why, text=predicate.text, further=further)

    skipped: set[int] = set()
    is_ready = (lambda k: ready(cands[k])) if ready else None
    while hi - lo > 1:
        k = pick(lo, hi, skipped, is_ready)
        if k is None:
            break
        start_cb(cands[k], _remaining(hi - lo))
        if prefetch:
            nxt = [pick(lo, k, skipped), pick(k, hi, skipped)]
            prefetch([cands[i] for i in nxt if i is not None])
        [obs] = evaluate([cands[k]])
        answer, why = predicate.judge(obs, good_ref)
        record(k, obs, answer, why)
        if answer == "skip":
            skipped.add(k)
        elif answer == old_answer:
            lo = k
        else:
            hi = k
    untested = [cands[i] for i in sorted(skipped) if lo < i < hi]
    return SearchResult(cands, find_fix, cands[lo], cands[hi], untested, steps)
