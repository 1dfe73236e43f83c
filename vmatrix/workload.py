"""A workload as the replay runs it: requests in phases, each with what its answer should be.

Built by ``jobs.workload`` (canary workloads) and ``jobs.traces`` (recorded traces);
replayed by ``jobs.replay``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vmatrix.expect import Expectation

Api = Literal["chat", "completions"]  # the OpenAI API a workload is replayed through


@dataclass(frozen=True)
class ReplayRequest:
    key: str  # "<session>/<turn>": the join key between a cell and its control
    session: str
    turn: int
    phase: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    # What the answer should be (ground truth for recall grading); None: not known.
    expect: Expectation | None = None

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
    api: Api = "chat"
    # Keys of the requests that ask for the line a cached block boundary splits (probe_block_tokens).
    probes: tuple[str, ...] = ()

    @property
    def requests(self) -> list[ReplayRequest]:
        return [r for _, reqs in self.phases for r in reqs]

    @property
    def restart_points(self) -> tuple[str, ...]:
        """The restarts the replay executes, in phase order: every ``restart_after`` phase
        but the last phase (nothing would follow it)."""
        names = [name for name, _ in self.phases]
        return tuple(n for n in names[:-1] if n in self.restart_after)
