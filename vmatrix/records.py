"""What a replay records: plain values that travel from a Ray task to the driver.

Kept free of I/O so the grader, the store and the tests can share them; unit tests
build them from recorded transcripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vmatrix.expect import Expectation


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
    # Prompt tokens the engine served from its prefix cache (the usage's
    # prompt_tokens_details.cached_tokens); None: not reported (runs before 0009 too).
    cached_tokens: int | None = None

    @property
    def answer(self) -> str | None:
        """The model's answer, as it would have returned it without ignore_eos; None when
        it did not finish one within max_tokens."""
        return self.text[:self.answer_chars] if self.answer_chars is not None else None


def answer_span(tokens: Sequence[int], end_tokens: frozenset[int]) -> int | None:
    """How many of a run's tokens are its answer: up to and including its first
    end-of-turn token; None (all of them) when it wrote none or the end tokens are unknown.

    The replay generates past the end token (``ignore_eos``) so that every position has a
    control token to compare with, but what follows it is text no user receives and no
    model was trained to write: a confident model's tiny differences there (a prefix-cached
    path's arithmetic) grow into divergences at small margins. Token rules grade the answer.
    """
    end = next((i for i, t in enumerate(tokens) if t in end_tokens), None) if end_tokens else None
    return None if end is None else end + 1


# A control run's layout source when the sweep laid it out on a block one of its cells'
# engines reported (the cell's engine chose another block than the control's: a Mamba2
# model's prefix-cached block is a multiple of its scan chunk, its plain one is not).
FOLLOWS_CELLS = "cells"


@dataclass(frozen=True)
class Layout:
    """The engine's blocks as it reported them when it started, and the block the replay
    laid its requests out on."""

    block_tokens: int | None  # laid out on (None: an unshaped workload without probe_block_tokens)
    source: str  # engine | probe_block_tokens | guessed | unshaped | cells (FOLLOWS_CELLS)
    attention_block: int | None = None  # "Setting attention block size to N tokens"
    group_blocks: tuple[int, ...] = ()  # "kv cache group sizes [...]": each KV cache group's block
    requests_digest: str | None = None  # the requests as laid out (jobs.workload.requests_digest)
    # The shape builders' layout (jobs.shapes.LAYOUT_VERSION) the requests were built with:
    # a regrade rebuilds them the same way. Runs recorded before it was kept used the first.
    layout_version: int = 1

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "group_blocks": list(self.group_blocks)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Layout | None:
        return None if data is None else cls(**{**data, "group_blocks": tuple(data.get("group_blocks") or ())})


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
    # What the requests were laid out on (shaped workloads): :class:`Layout`; None before 0009.
    layout: Layout | None = None

    def by_key(self) -> dict[str, RequestRecord]:
        return {r.key: r for r in self.requests}


@dataclass(frozen=True)
class ControlReference:
    """What a replay needs of its control to abort early: tokens and margins per request.

    Built by the scheduler from the control's recorded run and handed to the cell's task
    (data flows one way: the replay never reads the store).
    """

    tokens: dict[str, tuple[int, ...]]  # the control's answers (answer_span), or whole outputs
    margins: dict[str, tuple[float | None, ...]]
    tie_margin: float
    abort_after: int  # stop sending after this many confident divergences
    # What the control's requests were laid out on: a cell laid out on another block sent
    # other prompts under the same keys, so its answers cannot be held against these.
    block_tokens: int | None = None

    @classmethod
    def from_transcript(cls, control: Transcript, tie_margin: float, abort_after: int,
                        end_tokens: frozenset[int] = frozenset()) -> ControlReference:
        ok = [r for r in control.requests if not r.error]
        spans = {r.key: answer_span(r.token_ids, end_tokens) for r in ok}
        return cls({r.key: tuple(r.token_ids[:spans[r.key]]) for r in ok},
                   {r.key: tuple(r.margins[:spans[r.key]]) for r in ok}, tie_margin, abort_after,
                   control.layout.block_tokens if control.layout else None)
