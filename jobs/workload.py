"""Shared-prefix agent workloads, generated deterministically from a seed.

The shape is the reproduction users describe (shared/DOMAIN.md): one long shared
prefix (system prompt, tool schemas, persona), several sessions of several turns
sent concurrently so prefills share the token budget, then "agent switches": new
sessions that hit the same prefix and differ only at the tail. Histories are fixed
text, never the live output, so every request is comparable with its control.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Literal

from images.canary import corpus
from jobs.expect import Expectation

if TYPE_CHECKING:
    from orchestrator.spec import WorkloadSpec

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

    @property
    def requests(self) -> list[ReplayRequest]:
        return [r for _, reqs in self.phases for r in reqs]

    @property
    def restart_points(self) -> tuple[str, ...]:
        """The restarts the replay executes, in phase order: every ``restart_after`` phase
        but the last phase (nothing would follow it)."""
        names = [name for name, _ in self.phases]
        return tuple(n for n in names[:-1] if n in self.restart_after)


# Tokens before the first definition line of a system prompt (chat header, HEADER and the
# tools line), measured with the shipped canary's tokenizer as corpus.TOKENS_PER_LINE is.
PREAMBLE_TOKENS = 40
# What the sessions share past the system prompt: "<|im_end|>\n<|im_start|>user\nturn ".
SHARED_TAIL_TOKENS = 8


def boundary_lines(lines: int, block_tokens: int) -> list[int]:
    """The definition lines about where the last cached block inside the shared prefix
    ends: a request that hits the cache restores the carried state there, and computes
    the words of that line from it. Estimated from token counts, so two lines either side."""
    shared = PREAMBLE_TOKENS + lines * corpus.TOKENS_PER_LINE + SHARED_TAIL_TOKENS
    boundary = int(shared // block_tokens) * block_tokens
    k = int((boundary - PREAMBLE_TOKENS) // corpus.TOKENS_PER_LINE)
    return sorted({min(lines - 1, max(0, k + d)) for d in range(-2, 3)})


def build_workload(spec: WorkloadSpec) -> Workload:
    if spec.kind == "trace":
        from jobs.traces import load_trace, trace_to_workload

        return replace(trace_to_workload(load_trace(spec.trace), spec.max_tokens, spec.top_logprobs), api=spec.api)
    rng = random.Random(spec.seed)
    system, defs = corpus.system_prompt(rng, corpus.lines_for(spec.prefix_tokens))
    # Recorded histories: each user turn asks for an identifier from the prefix, and
    # the recorded answer (sent back as history next turn) recites it correctly; it is
    # also what the request expects the model to answer.
    probes = boundary_lines(len(defs), spec.probe_block_tokens) if spec.probe_block_tokens else []
    asked = 0
    histories: dict[str, list[tuple[str, str]]] = {}
    for s in range(spec.sessions + spec.agent_switches):
        sid = f"s{s}"
        histories[sid] = []
        for t in range(spec.turns):
            if probes and (t > 0 or s >= spec.sessions):  # a request that hits the cache
                i = probes[asked % len(probes)]
                asked += 1
                user, _ = corpus.user_turn(rng, [defs[i]], t)
            else:
                user, i = corpus.user_turn(rng, defs, t)
            histories[sid].append((user, corpus.answer(defs, i)))

    def request(sid: str, turn: int, phase: str) -> ReplayRequest:
        msgs: list[tuple[str, str]] = [("system", system)]
        for user, answer in histories[sid][:turn]:
            msgs += [("user", user), ("assistant", answer)]
        user, expected = histories[sid][turn]
        msgs.append(("user", user))
        return ReplayRequest(key=f"{sid}/{turn}", session=sid, turn=turn, phase=phase, messages=tuple(msgs),
                             expect=Expectation.exact(expected))

    phases = []
    for t in range(spec.turns):
        phases.append((f"turn-{t}", tuple(request(f"s{s}", t, f"turn-{t}") for s in range(spec.sessions))))
    for k in range(spec.agent_switches):
        sid = f"s{spec.sessions + k}"
        # An agent switch: a fresh session on the warm shared prefix, after the others.
        phases.append((f"switch-{k}", (request(sid, 0, f"switch-{k}"),)))
    return Workload(name=spec.name, phases=tuple(phases), max_tokens=spec.max_tokens, top_logprobs=spec.top_logprobs,
                    api=spec.api)


def _request_content(r: ReplayRequest) -> dict[str, object]:
    content = asdict(r)
    # Only when present: requests without an expectation keep the digests (and cell ids)
    # they had before expectations existed.
    content.pop("expect")
    if r.expect is not None:
        content["expect"] = r.expect.to_json()
    return content


def workload_digest(spec: WorkloadSpec) -> str:
    wl = build_workload(spec)
    content: dict[str, object] = {
        "phases": [[name, [_request_content(r) for r in reqs]] for name, reqs in wl.phases],
        "max_tokens": wl.max_tokens, "top_logprobs": wl.top_logprobs,
    }
    if wl.restart_after:
        # Only when present: workloads without restarts keep the digests (and cell ids)
        # they had before replays executed restart points.
        content["restart_after"] = list(wl.restart_after)
    if wl.api != "chat":
        # Likewise: chat workloads keep the digests they had before the API was a choice.
        content["api"] = wl.api
    payload = json.dumps(content, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()
