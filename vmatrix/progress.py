"""Progress of the long steps of a sweep: what a person watches while nothing is recorded yet.

A step (building an engine environment or image, building the canary, starting an
engine, replaying the workload) reports :class:`Step` values as it goes. They are for
the screen only, never recorded: a lost one costs nothing, so they are sent
fire-and-forget and thinned at the source by :class:`Throttle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# The steps, as the driver names them on screen.
ENV, IMAGE, CANARY, ENGINE, REPLAY = "env", "image", "canary", "engine", "replay"
SETUP = ""  # the cell id a sweep's own setup (the canary and its env) reports under


@dataclass(frozen=True)
class Step:
    """Where one long step is: ``detail`` says what it is doing (``loading weights``,
    ``step 3/12: RUN pip install ...``); ``done`` of ``total`` when it can count."""

    step: str
    detail: str
    done: int | None = None
    total: int | None = None

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done == self.total

    def line(self) -> str:
        """One line for a log or a pipe."""
        count = f" {self.done}/{self.total}" if self.total is not None else ""
        return f"{self.step}: {self.detail}{count}"


StepReport = Callable[[Step], None]


class Throttle:
    """Passes a step on when it says something new (another step or detail, or the last
    of its count), and a count's progress at most every ``interval_s``: a replay of
    thousands of requests sends a few updates a second, not one per request."""

    def __init__(self, report: StepReport, interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self._report = report
        self._interval = interval_s
        self._clock = clock
        self._last: Step | None = None
        self._sent_at = float("-inf")

    def __call__(self, step: Step) -> None:
        now = self._clock()
        last = self._last
        news = last is None or (step.step, step.detail, step.total) != (last.step, last.detail, last.total)
        if step != last and (news or step.finished or now - self._sent_at >= self._interval):
            self._report(step)
            self._last, self._sent_at = step, now
