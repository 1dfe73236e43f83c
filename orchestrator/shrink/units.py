"""What `vmatrix shrink` removes, and the workloads a kept set of requests makes.

A race is about which prompts arrive together, so the units are the workload's own
structure, coarse to fine:

- ``groups``: phases joined by the sessions they share (a cold race: its cold phase and its
  resend phase; a shape's repeat is a group of its own);
- ``sessions``: a session's requests together (a cold prompt with its resend);
- ``requests``: one request (a cold prompt kept for the race it makes, its resend dropped).

A kept set is written down as a trace (jobs/traces.py) whose sessions carry their own
system message, so the probe replays exactly the recorded requests, in their recorded
phases, each phase's sent at once; :func:`as_trace` checks that it does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vmatrix.errors import TraceError
from vmatrix.jobs.traces import Phase, Schedule, Session, SharedPrefix, Trace, Turn, trace_to_workload
from vmatrix.workload import ReplayRequest, Workload

LEVELS = ("groups", "sessions", "requests")


@dataclass(frozen=True)
class Unit:
    """One removable piece of a workload: the request keys it stands for."""

    name: str
    keys: frozenset[str]


def _groups(workload: Workload) -> list[Unit]:
    """Phases that share a session, joined (union-find over phase indices), in phase order."""
    parent = list(range(len(workload.phases)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, (_, reqs) in enumerate(workload.phases):
        for r in reqs:
            if r.session in first:
                parent[root(i)] = root(first[r.session])
            else:
                first[r.session] = i
    members: dict[int, list[int]] = {}
    for i in range(len(workload.phases)):
        members.setdefault(root(i), []).append(i)
    return [Unit(" + ".join(workload.phases[i][0] for i in idx),
                 frozenset(r.key for i in idx for r in workload.phases[i][1]))
            for idx in members.values()]


def units(workload: Workload, level: str, keep: Iterable[str] | None = None) -> list[Unit]:
    """The units of ``level`` among the requests ``keep`` (all when None), in send order."""
    kept = set(keep) if keep is not None else {r.key for r in workload.requests}
    if level == "groups":
        found = [Unit(u.name, u.keys & kept) for u in _groups(workload)]
    elif level == "sessions":
        by_session: dict[str, set[str]] = {}
        for r in workload.requests:
            if r.key in kept:
                by_session.setdefault(r.session, set()).add(r.key)
        found = [Unit(s, frozenset(keys)) for s, keys in by_session.items()]
    elif level == "requests":
        found = [Unit(r.key, frozenset({r.key})) for r in workload.requests if r.key in kept]
    else:
        raise ValueError(f"level {level!r}: one of {', '.join(LEVELS)}")
    return [u for u in found if u.keys]


def subset(workload: Workload, keep: Iterable[str]) -> Workload:
    """The workload with only the requests ``keep``: phases in order, each with its kept
    requests in their order; a phase left empty is gone."""
    kept = set(keep)
    phases = tuple((name, tuple(r for r in reqs if r.key in kept)) for name, reqs in workload.phases)
    return Workload(name=workload.name, phases=tuple(p for p in phases if p[1]), max_tokens=workload.max_tokens,
                    top_logprobs=workload.top_logprobs, api=workload.api)


def _session_of(requests: Sequence[ReplayRequest]) -> Session:
    """One session whose turn t replays as the request of turn t: the longest request's
    messages hold the history (system, then user/assistant pairs, then the question)."""
    longest = max(requests, key=lambda r: r.turn)
    messages = list(longest.messages)
    system = messages.pop(0)[1] if messages and messages[0][0] == "system" else ""
    turns: list[Turn] = []
    while messages:
        role, user = messages.pop(0)
        if role != "user":
            raise TraceError(f"request {longest.key}: a {role} message where a user turn should be")
        answer = messages.pop(0)[1] if messages and messages[0][0] == "assistant" else ""
        turns.append(Turn(user=user, assistant=answer))
    expect = {r.turn: r.expect for r in requests}
    turns = [Turn(t.user, t.assistant, (), expect.get(i)) for i, t in enumerate(turns)]
    return Session(id=longest.session, turns=tuple(turns), system=system)


def as_trace(workload: Workload) -> Trace:
    """The workload written down as a trace that replays exactly its requests, or a
    TraceError naming the first request a trace cannot express (say, a resend of the same
    prompt as a later turn)."""
    by_session: dict[str, list[ReplayRequest]] = {}
    for r in workload.requests:
        by_session.setdefault(r.session, []).append(r)
    sessions = tuple(_session_of(reqs) for reqs in by_session.values())
    schedule = Schedule(tuple(Phase(name, tuple((r.session, r.turn) for r in reqs)) for name, reqs in workload.phases))
    trace = Trace(name=workload.name, prefix=SharedPrefix(), sessions=sessions, schedule=schedule)
    try:
        replayed = trace_to_workload(trace, workload.max_tokens, workload.top_logprobs)
    except TraceError as exc:
        raise TraceError(f"workload {workload.name!r} cannot be written as a trace: {exc}") from None
    for want, got in zip(workload.requests, replayed.requests, strict=True):
        if (want.key, want.phase, want.messages, want.expect) != (got.key, got.phase, got.messages, got.expect):
            raise TraceError(f"workload {workload.name!r}: request {want.key} cannot be written as a trace turn "
                             "(its messages are not its session's history)")
    return trace
