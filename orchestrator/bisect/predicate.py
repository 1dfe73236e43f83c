"""What makes a bisect step bad: the predicate grammar, and the observation it judges.

The bottom of the package: it imports nothing from the rest of it but its errors. The
status and verdict names are the cells' (:mod:`vmatrix.cells`), the legacy verdict
names the results DB's (:data:`vmatrix.cells.LEGACY_VERDICTS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from vmatrix.cells import LEGACY_VERDICTS, RANK, STATUSES, VERDICTS
from vmatrix.orchestrator.bisect.errors import BisectInputError

Answer = Literal["good", "bad", "skip"]

METRICS = ("decode_tps", "ttft_s", "e2e_s")


@dataclass(frozen=True)
class Observation:
    """What one engine version did on the selected cell (from its stored run)."""

    candidate: str
    status: str | None = None
    verdict: str | None = None
    signature: str | None = None
    run_id: int | None = None
    seconds: float | None = None  # the run's own wall time, as recorded
    reused: bool = False  # the run was already in the results DB: no engine started now
    metrics: dict[str, float] = field(default_factory=dict)
    unavailable: str | None = None  # set when the version could not be run at all
    never_ready: bool = False  # timed out before the engine answered its health check


_EQ = re.compile(r"^\s*(verdict|status)\s*(==|!=)\s*([a-z_]+)\s*$")
# Verdicts are ordered (vmatrix.cells.RANK): `verdict >= degraded` is "worse than answers
# that were right", so a `partial` (right, part of the claim unmeasured) is not a bad step.
_ORDERED = re.compile(r"^\s*verdict\s*(>=|<=|>|<)\s*([a-z_]+)\s*$")
DEFAULT = "verdict >= degraded"
_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
_METRIC = re.compile(
    rf"^\s*({'|'.join(METRICS)})\s*(<=|>=|<|>)\s*"
    rf"(?:{_NUM}\s*\*\s*good|good\s*\*\s*{_NUM}|(good)|{_NUM})\s*$"
)


@dataclass(frozen=True)
class Predicate:
    """What makes a step *bad*. Parsed from text by a tiny grammar, never ``eval``.

    ``verdict (==|!=) NAME``, ``status (==|!=) NAME``, ``verdict (>=|>|<=|<) NAME`` (in
    the order of :data:`vmatrix.cells.RANK`), or ``METRIC (<|<=|>|>=) RHS``
    where RHS is a number, ``F * good`` or ``good * F`` (``good``: the metric measured
    on the good endpoint, so "10 % slower than the good release" is
    ``decode_tps < 0.9 * good``).
    """

    text: str
    kind: Literal["verdict", "status", "metric", "rank"]
    op: str
    value: str | float  # verdict/status name, or the number (absolute, or factor of good)
    relative: bool = False
    metric: str | None = None

    @property
    def names_failure(self) -> bool:
        """Whether the predicate itself is about an engine that failed to build or start.

        Only then is a ``startup_failed`` step an answer (``status == startup_failed``,
        ``status != ok``); otherwise it is a skip: the version cannot be tested for this
        question (a verdict or a metric), like ``git bisect skip``.
        """
        if self.kind == "status":
            return (self.op == "==") == (self.value == "startup_failed")
        return self.kind == "verdict" and self.op == "==" and self.value == "startup_failed"

    def judge(self, obs: Observation, good_ref: float | None = None) -> tuple[Answer, str]:
        """good/bad/skip for one observation, with the reason shown in the steps table."""
        if obs.unavailable:
            return "skip", obs.unavailable
        if obs.status == "startup_failed" and not self.names_failure:
            return "skip", f"startup_failed: {obs.signature or ''}".strip().rstrip(":")
        if obs.never_ready and not (self.kind == "status" and (self.value == "timeout" or self.names_failure)):
            # An engine that never got ready (a loaded machine, a slow start) has not
            # answered whether it crashes, diverges or is slow: judging it "good" for
            # `status == crashed` would point the search the wrong way.
            return "skip", "timeout before the engine was ready"
        if obs.status == "task_failed" and self.value != "task_failed":
            # vmatrix's task died around the engine: the version answered nothing.
            return "skip", f"task_failed: {obs.signature or ''}".strip().rstrip(":")
        if obs.status == "invalid" and self.value != "invalid":
            # The knobs break a geometry rule on every version: nothing to learn here.
            return "skip", f"invalid: {obs.signature or ''}".strip().rstrip(":")
        if self.kind == "rank":
            got = obs.verdict
            if got is None or got not in RANK:
                return "skip", f"not graded (status {obs.status})" if got is None else f"{got}: not ranked"
            if got == "unexercised" and self.value != "unexercised":
                # The cell never reached what it tests (no prefix hit, no draft): ranked
                # as good it would hide the question, as bad it would invent an answer.
                return "skip", "unexercised: the cell never reached what it tests"
            hit = _cmp(self.op, RANK[got], RANK[str(self.value)])
            return ("bad" if hit else "good"), f"verdict {got}"
        if self.kind in ("verdict", "status"):
            got = obs.verdict if self.kind == "verdict" else obs.status
            if self.kind == "verdict" and got is None:
                return "skip", f"not graded (status {obs.status})"
            if self.kind == "verdict" and got == "ungraded" and self.value != "ungraded":
                return "skip", "ungraded: its control did not run ok"
            hit = (got == self.value) if self.op == "==" else (got != self.value)
            return ("bad" if hit else "good"), f"{self.kind} {got}"
        assert self.metric is not None
        if obs.status != "ok":
            return "skip", f"no {self.metric}: status {obs.status}"
        got_value = obs.metrics.get(self.metric)
        if got_value is None:
            return "skip", f"no {self.metric} measured"
        if self.relative:
            if good_ref is None:
                return "skip", f"no {self.metric} on the good end to compare with"
            bound = float(self.value) * good_ref
        else:
            bound = float(self.value)
        hit = _cmp(self.op, got_value, bound)
        return ("bad" if hit else "good"), f"{self.metric} {got_value:.3g} ({self.op} {bound:.3g}: {hit})"


def _cmp(op: str, left: float, right: float) -> bool:
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def parse_predicate(text: str) -> Predicate:
    if m := _ORDERED.match(text):
        op, value = m.groups()
        value = LEGACY_VERDICTS.get(value, value)
        if value not in RANK or value not in VERDICTS:
            raise BisectInputError("{predicate}: unknown verdict '{value}' to order by (known: {known})",
                                   value=value, known=", ".join(v for v in VERDICTS if v in RANK))
        return Predicate(text.strip(), "rank", op, value)
    if m := _EQ.match(text):
        kind, op, value = m.groups()
        if kind == "verdict":  # an old verdict name reads as the new one, as stored grades do
            value = LEGACY_VERDICTS.get(value, value)
        allowed = VERDICTS if kind == "verdict" else STATUSES
        if value not in allowed:
            raise BisectInputError("{predicate}: unknown {kind} '{value}' (known: {known})", kind=kind, value=value,
                                   known=", ".join(allowed))
        return Predicate(text.strip(), kind, op, value)  # type: ignore[arg-type]
    if m := _METRIC.match(text):
        metric, op, left_factor, right_factor, bare_good, number = m.groups()
        if number is not None:
            return Predicate(text.strip(), "metric", op, float(number), relative=False, metric=metric)
        factor = float(left_factor or right_factor or 1.0) if not bare_good else 1.0
        return Predicate(text.strip(), "metric", op, factor, relative=True, metric=metric)
    raise BisectInputError(
        "{predicate}: cannot read '{text}'; use `verdict >= degraded`, `verdict != clean`, `status == crashed` "
        "or `METRIC < 0.9 * good` with METRIC one of {metrics}", text=text, metrics=", ".join(METRICS)
    )
