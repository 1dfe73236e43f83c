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
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.spec import WorkloadSpec

_CODE = "def return import class self if else for while yield async await try except raise with as lambda".split()
_PROSE = (
    "the engine reads a cache block and the state of every layer is kept so that a later turn can "
    "continue where the agent stopped before it called a tool and wrote the result into the file"
).split()
_TOOLS = ["read_file", "write_file", "run_tests", "search_code", "list_dir", "git_diff", "http_get"]


@dataclass(frozen=True)
class ReplayRequest:
    key: str  # "<session>/<turn>": the join key between a cell and its control
    session: str
    turn: int
    phase: str
    messages: tuple[tuple[str, str], ...]  # (role, content)

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True)
class Workload:
    name: str
    phases: tuple[tuple[str, tuple[ReplayRequest, ...]], ...]  # run in order; requests within at once
    max_tokens: int
    top_logprobs: int

    @property
    def requests(self) -> list[ReplayRequest]:
        return [r for _, reqs in self.phases for r in reqs]


def _words(rng: random.Random, n: int, pool: list[str]) -> str:
    return " ".join(rng.choice(pool) for _ in range(n))


def _system_prompt(rng: random.Random, tokens: int) -> str:
    tools = [
        {"name": t, "description": _words(rng, 8, _PROSE), "parameters": {"path": "string", "limit": "integer"}}
        for t in _TOOLS
    ]
    head = "You are a coding agent. Tools:\n" + json.dumps(tools) + "\nKnown identifiers:\n"
    lines = [head]
    budget = max(tokens - len(head.split()) * 2, 0)
    i = 0
    while budget > 0:
        pool = _CODE if i % 2 else _PROSE
        line = f"var_{rng.randint(0, 999)} = {_words(rng, 10, pool)}"
        lines.append(line)
        budget -= 14
        i += 1
    return "\n".join(lines)


def build_workload(spec: WorkloadSpec) -> Workload:
    rng = random.Random(spec.seed)
    system = _system_prompt(rng, spec.prefix_tokens)
    # Recorded histories: the user turn and the assistant answer that the replay
    # sends back as history on the next turn.
    histories: dict[str, list[tuple[str, str]]] = {}
    for s in range(spec.sessions + spec.agent_switches):
        sid = f"s{s}"
        histories[sid] = []
        for t in range(spec.turns):
            user = f"turn {t} of {sid}: " + _words(rng, rng.randint(6, 30), _PROSE + _CODE)
            tool = rng.choice(_TOOLS)
            answer = f"<tool_call>{tool}</tool_call> " + _words(rng, rng.randint(10, 40), _CODE + _PROSE)
            histories[sid].append((user, answer))

    def request(sid: str, turn: int, phase: str) -> ReplayRequest:
        msgs: list[tuple[str, str]] = [("system", system)]
        for user, answer in histories[sid][:turn]:
            msgs += [("user", user), ("assistant", answer)]
        msgs.append(("user", histories[sid][turn][0]))
        return ReplayRequest(key=f"{sid}/{turn}", session=sid, turn=turn, phase=phase, messages=tuple(msgs))

    phases = []
    for t in range(spec.turns):
        phases.append((f"turn-{t}", tuple(request(f"s{s}", t, f"turn-{t}") for s in range(spec.sessions))))
    for k in range(spec.agent_switches):
        sid = f"s{spec.sessions + k}"
        # An agent switch: a fresh session on the warm shared prefix, after the others.
        phases.append((f"switch-{k}", (request(sid, 0, f"switch-{k}"),)))
    return Workload(name=spec.name, phases=tuple(phases), max_tokens=spec.max_tokens, top_logprobs=spec.top_logprobs)


def workload_digest(spec: WorkloadSpec) -> str:
    wl = build_workload(spec)
    payload = json.dumps(
        {"phases": [[name, [asdict(r) for r in reqs]] for name, reqs in wl.phases],
         "max_tokens": wl.max_tokens, "top_logprobs": wl.top_logprobs},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()
