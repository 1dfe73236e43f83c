"""A workload as the replay runs it: requests in phases, each with what its answer should be.

Built by ``jobs.workload`` (canary workloads) and ``jobs.traces`` (recorded traces);
replayed by ``jobs.replay``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vmatrix.expect import Expectation

Api = Literal["chat", "completions"]  # the OpenAI API a workload is replayed through
# Where a probed line lies relative to the restore point of its request's cache hit: its
# words inside the last restored block, split by the restore point, or computed after it.
Probe = Literal["before", "at", "after"]


@dataclass(frozen=True)
class Claim:
    """Where a shaped request lies on the engine's blocks (jobs/shapes.py), so the grader can
    check that what the shape is about happened: the prompt's length as the engine counts
    it, the restore point a cache hit should reach, the block boundary its decode should
    cross. None: the shape claims nothing of that kind for this request."""

    prompt_tokens: int
    hit_at: int | None = None  # a hit should restore at least this many tokens (a block boundary)
    crosses: int | None = None  # the decode should run past this block boundary
    probe: Probe | None = None  # the asked line, relative to hit_at
    # The asked line's tokens, [its newline, after its last word): where it lies relative to
    # the restore point a hit actually reached is known once the engine says its hit.
    asked: tuple[int, int] | None = None


@dataclass(frozen=True)
class ReplayRequest:
    key: str  # "<session>/<turn>": the join key between a cell and its control
    session: str
    turn: int
    phase: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    # What the answer should be (ground truth for recall grading); None: not known.
    expect: Expectation | None = None
    shape: str = ""  # the shape it belongs to (WorkloadSpec.shapes); "": an unshaped workload
    claim: Claim | None = None
    # Which repeat of its shape it belongs to (0: the first; a shape's ``repeat: N`` lays
    # it out again on fresh prompts), so evidence can be counted per repeat.
    repeat: int = 0

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True)
class Workload:
    name: str
    phases: tuple[tuple[str, tuple[ReplayRequest, ...]], ...]  # run in order; requests within at once
    max_tokens: int
    top_logprobs: int
    # Phases after which the engine is stopped and started again (trace restart points).
    restart_after: tuple[str, ...] = ()
    # Phases held at the engine's scheduler until all their requests are queued (a shape's
    # ``gate: true``; jobs/replay.py): the same chunk layout every run.
    gated: tuple[str, ...] = ()
    api: Api = "chat"
    # Keys of the requests that ask for the line a cached block boundary splits (probe_block_tokens).
    probes: tuple[str, ...] = ()
    # The block the requests were laid out on (shaped workloads: the engine's, learned when it
    # started; or probe_block_tokens); None: not laid out on blocks.
    block_tokens: int | None = None

    @property
    def requests(self) -> list[ReplayRequest]:
        return [r for _, reqs in self.phases for r in reqs]

    @property
    def restart_points(self) -> tuple[str, ...]:
        """The restarts the replay executes, in phase order: every ``restart_after`` phase
        but the last phase (nothing would follow it)."""
        names = [name for name, _ in self.phases]
        return tuple(n for n in names[:-1] if n in self.restart_after)
