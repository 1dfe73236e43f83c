"""What a replay records: plain values that travel from a Ray task to the driver.

Kept free of I/O so the grader, the store and the tests can share them; unit tests
build them from recorded transcripts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.expect import Expectation


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
    # Inter-token latencies: the gaps between consecutive streamed chunks that carry
    # tokens (as vLLM's serving benchmark counts them). A chunk of several tokens
    # (speculative decoding accepting drafts) is one gap, so len(itl_s) can be less
    # than len(token_ids) - 1; empty on runs recorded before ITLs were (0007).
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    error: str | None = None
    # Engine restarts before this request was sent (trace restart points): a request
    # with restarts > 0 was served by a restarted engine (and, with LMCache, its L2).
    restarts: int = 0
    # What the answer should be: the workload request's expectation, copied by the
    # replay (None: not known; always None on runs recorded before 0008).
    expect: Expectation | None = None
    # How many characters of `text` the model wrote before its first end-of-turn token.
    # The replay generates max_tokens tokens regardless (ignore_eos), so `text` goes on
    # past the answer. None: no end token within max_tokens (the answer was cut), or the
    # model's end tokens were not known to the replay.
    answer_chars: int | None = None

    @property
    def answer(self) -> str | None:
        """The model's answer, as it would have returned it without ignore_eos; None when
        it did not finish one within max_tokens."""
        return self.text[:self.answer_chars] if self.answer_chars is not None else None


@dataclass
class Transcript:
    """Everything a replay produced against one engine."""

    requests: list[RequestRecord] = field(default_factory=list)
    # phase -> metric sample name (labels folded in, e.g. "...per_pos_total{position=0}")
    # -> counter delta over that phase.
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    # Early abort (ControlReference.abort_after): the replay stopped sending after enough
    # confident divergences; these requests were never sent. Not sent is not missing.
    aborted_early: bool = False
    skipped: list[str] = field(default_factory=list)

    def by_key(self) -> dict[str, RequestRecord]:
        return {r.key: r for r in self.requests}


@dataclass(frozen=True)
class ControlReference:
    """What a replay needs of its control to abort early: tokens and margins per request.

    Built by the scheduler from the control's recorded run and handed to the cell's task
    (data flows one way: the replay never reads the store).
    """

    tokens: dict[str, tuple[int, ...]]
    margins: dict[str, tuple[float | None, ...]]
    tie_margin: float
    abort_after: int  # stop sending after this many confident divergences

    @classmethod
    def from_transcript(cls, control: Transcript, tie_margin: float, abort_after: int) -> ControlReference:
        ok = [r for r in control.requests if not r.error]
        return cls({r.key: tuple(r.token_ids) for r in ok}, {r.key: tuple(r.margins) for r in ok},
                   tie_margin, abort_after)
