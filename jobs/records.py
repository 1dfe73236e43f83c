"""What a replay records: plain values that travel from a Ray task to the driver.

Kept free of I/O so the grader, the store and the tests can share them; unit tests
build them from recorded transcripts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One replayed request and what the engine streamed back."""

    key: str  # stable across cells: "<session>/<turn>", the join key for grading
    session: str
    turn: int
    phase: str
    prompt_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # top-1 minus top-2 logprob per generated token: how close greedy was to a tie.
    margins: list[float | None] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None
    # Engine restarts before this request was sent (trace restart points): a request
    # with restarts > 0 was served by a restarted engine (and, with LMCache, its L2).
    restarts: int = 0


@dataclass
class Transcript:
    """Everything a replay produced against one engine."""

    requests: list[RequestRecord] = field(default_factory=list)
    # phase -> metric sample name (labels folded in, e.g. "...per_pos_total{position=0}")
    # -> counter delta over that phase.
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    def by_key(self) -> dict[str, RequestRecord]:
        return {r.key: r for r in self.requests}
