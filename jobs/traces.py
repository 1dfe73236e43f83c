"""Recorded agent-session traces: the ``vmatrix.trace/1`` JSONL format.

A trace is a workload written down instead of generated: one shared prefix (system
prompt, tool schemas, persona), recorded sessions of turns, and a schedule saying
which turns go out together, where agent switches happen and where the engine is
restarted. Replays send the *recorded* assistant turns as history, never the live
output, so every request of a cell has the same prompt as its control and the two
can be compared token by token. The format is documented in docs/traces.md.

A bad trace is one line naming file and line (``FILE:LINE: problem``), the same
contract as the matrix file: a user with a 40 MB trace must not have to bisect it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmatrix.errors import TraceError
from vmatrix.expect import Expectation
from vmatrix.workload import ReplayRequest, Workload

SCHEMA = "vmatrix.trace/1"
_TURN_KEYS = {"user", "assistant", "tool_results", "expect"}


@dataclass(frozen=True)
class SharedPrefix:
    """What every session starts with; rendered into one system message."""

    system: str = ""
    # Tool names (str) or OpenAI-style tool schemas (JSON objects). Replays send
    # them as text inside the system message (jobs.workload messages are text only).
    tools: tuple[Any, ...] = ()
    persona: str = ""

    def render(self) -> str:
        """The system message: system, a ``tools: ...`` line, persona; empty parts left out.

        With the canary's HEADER, TOOLS and definitions this is byte-equal to
        ``corpus.system_prompt``, so synthetic traces look like the canary's training text.
        """
        tools = " ".join(t if isinstance(t, str) else _compact(t) for t in self.tools)
        parts = [self.system, f"tools: {tools}" if tools else "", self.persona]
        return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class Turn:
    """One step of an agent loop, in the order it happened.

    ``user`` (may be empty when the step is fed by tool output only), then the
    recorded ``assistant`` answer, then the ``tool_results`` the answer's tool calls
    produced, which are sent (as ``tool`` messages) with the next turn. ``expect``:
    what the replayed answer to this turn should be (vmatrix/expect.py), graded as recall
    against the control's; None: not known.
    """

    user: str = ""
    assistant: str = ""
    tool_results: tuple[str, ...] = ()
    expect: Expectation | None = None


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    # The session's own system message, sent instead of the shared prefix (None: the
    # shared prefix): what a shaped workload's requests written down need (`vmatrix shrink`).
    system: str | None = None


@dataclass(frozen=True)
class Phase:
    name: str
    requests: tuple[tuple[str, int], ...]  # (session id, turn index), sent at once


@dataclass(frozen=True)
class Schedule:
    phases: tuple[Phase, ...]
    restart_after: tuple[str, ...] = ()  # phase names after which the engine restarts


@dataclass(frozen=True)
class Trace:
    name: str
    prefix: SharedPrefix
    sessions: tuple[Session, ...]
    schedule: Schedule

    def session(self, sid: str) -> Session:
        for s in self.sessions:
            if s.id == sid:
                return s
        raise KeyError(sid)


@dataclass
class _Lines:
    """Where each part of a trace sits in its file, for error messages."""

    source: str
    header: int = 1
    sessions: dict[str, int] = field(default_factory=dict)
    schedule: int = 0


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- reading


def read_utf8(path: Path, what: str) -> str:
    """A text input file, or a one-line TraceError naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read {what}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_trace(path: Path | str) -> Trace:
    """Read and validate a trace; raise TraceError naming ``path:line``."""
    path = Path(path)
    return parse_trace(read_utf8(path, "trace"), str(path))


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    lines = _Lines(source)
    header: dict[str, Any] | None = None
    sessions: list[Session] = []
    schedule: Schedule | None = None
    last = 0
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        last = n
        where = f"{source}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: bad JSON ({exc.msg}, column {exc.colno}); truncated or corrupt trace?") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        kind = obj.get("type")
        if header is None:
            if kind != "header":
                raise TraceError(f"{where}: the first line must be the header ({{\"type\": \"header\", ...}}), got type {kind!r}")
            header = _header(obj, where)
            lines.header = n
        elif schedule is not None:
            raise TraceError(f"{where}: nothing may follow the schedule line (line {lines.schedule})")
        elif kind == "session":
            s = _session(obj, where)
            if s.id in lines.sessions:
                raise TraceError(f"{where}: session id {s.id!r} already defined on line {lines.sessions[s.id]}")
            lines.sessions[s.id] = n
            sessions.append(s)
        elif kind == "schedule":
            schedule = _schedule(obj, where)
            lines.schedule = n
        else:
            raise TraceError(f"{where}: unknown line type {kind!r} (expected session or schedule)")
    if header is None:
        raise TraceError(f"{source}:1: empty trace, expected a header line")
    if schedule is None:
        raise TraceError(f"{source}:{last}: trace ends without a schedule line (truncated trace?)")
    trace = Trace(name=header["name"], prefix=header["prefix"], sessions=tuple(sessions), schedule=schedule)
    _validate(trace, lines)
    return trace


def _header(obj: dict[str, Any], where: str) -> dict[str, Any]:
    schema = obj.get("schema")
    if schema != SCHEMA:
        raise TraceError(f"{where}: unknown trace schema {schema!r} (this vmatrix reads {SCHEMA!r})")
    _known(obj, {"type", "schema", "name", "shared_prefix"}, "header", where)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise TraceError(f"{where}: header.name must be a non-empty string")
    sp = obj.get("shared_prefix", {})
    if not isinstance(sp, dict):
        raise TraceError(f"{where}: header.shared_prefix must be an object")
    _known(sp, {"system", "tools", "persona"}, "shared_prefix", where)
    system, persona, tools = sp.get("system", ""), sp.get("persona", ""), sp.get("tools", [])
    if not isinstance(system, str) or not isinstance(persona, str):
        raise TraceError(f"{where}: shared_prefix.system and .persona must be strings")
    if not isinstance(tools, list) or not all(isinstance(t, (str, dict)) for t in tools):
        raise TraceError(f"{where}: shared_prefix.tools must be a list of tool names or tool schema objects")
    return {"name": name, "prefix": SharedPrefix(system=system, tools=tuple(tools), persona=persona)}


def _session(obj: dict[str, Any], where: str) -> Session:
    _known(obj, {"type", "id", "turns", "system"}, "session", where)
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise TraceError(f"{where}: session system must be a string")
    sid = obj.get("id")
    if not isinstance(sid, str) or not sid or "/" in sid:
        raise TraceError(f"{where}: session id must be a non-empty string without '/', got {sid!r}")
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns:
        raise TraceError(f"{where}: session {sid!r} has no turns")
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise TraceError(f"{where}: session {sid!r} turn {i} must be an object")
        unknown = set(t) - _TURN_KEYS
        if unknown:
            raise TraceError(
                f"{where}: session {sid!r} turn {i}: unknown key {min(unknown)!r} "
                f"(known: assistant, expect, tool_results, user)"
            )
        user, assistant, tools = t.get("user", ""), t.get("assistant", ""), t.get("tool_results", [])
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise TraceError(f"{where}: session {sid!r} turn {i}: user and assistant must be strings")
        if not isinstance(tools, list) or not all(isinstance(r, str) for r in tools):
            raise TraceError(f"{where}: session {sid!r} turn {i}: tool_results must be a list of strings")
        expect = None
        if "expect" in t:
            try:
                expect = Expectation.from_json(t["expect"])
            except ValueError as exc:
                raise TraceError(f"{where}: session {sid!r} turn {i}: {exc}") from None
        out.append(Turn(user=user, assistant=assistant, tool_results=tuple(tools), expect=expect))
    return Session(id=sid, turns=tuple(out), system=system)


def _schedule(obj: dict[str, Any], where: str) -> Schedule:
    _known(obj, {"type", "phases", "restart_after"}, "schedule", where)
    phases = obj.get("phases")
    if not isinstance(phases, list) or not phases:
        raise TraceError(f"{where}: schedule.phases must be a non-empty list")
    out = []
    for i, p in enumerate(phases):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            raise TraceError(f"{where}: schedule.phases[{i}] needs a non-empty name")
        _known(p, {"name", "requests"}, f"schedule.phases[{i}]", where)
        reqs = p.get("requests")
        if not isinstance(reqs, list) or not reqs:
            raise TraceError(f"{where}: phase {p['name']!r} has no requests")
        pairs = []
        for r in reqs:
            ok = isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
            ok = ok and isinstance(r[1], int) and not isinstance(r[1], bool)
            if not ok:
                raise TraceError(f"{where}: phase {p['name']!r}: a request is [session id, turn index], got {_compact(r)}")
            pairs.append((r[0], r[1]))
        out.append(Phase(name=p["name"], requests=tuple(pairs)))
    restart = obj.get("restart_after", [])
    if not isinstance(restart, list) or not all(isinstance(x, str) for x in restart):
        raise TraceError(f"{where}: schedule.restart_after must be a list of phase names")
    return Schedule(phases=tuple(out), restart_after=tuple(restart))


def _known(obj: dict[str, Any], keys: set[str], what: str, where: str) -> None:
    unknown = set(obj) - keys
    if unknown:
        raise TraceError(f"{where}: {what}: unknown key {min(unknown)!r} (known: {', '.join(sorted(keys))})")


def session_problem(s: Session) -> str | None:
    """Why a session cannot be replayed as recorded, or None.

    Every request must add something at its tail (else it repeats the previous
    prompt), and every answer a later turn sends as history must be recorded.
    """
    if not s.turns:
        return f"session {s.id!r} has no turns"
    for i, t in enumerate(s.turns):
        fed_by_tools = i > 0 and any(r for r in s.turns[i - 1].tool_results)
        if not t.user.strip() and not fed_by_tools:
            return f"session {s.id!r} turn {i} has no content (empty user and no tool results from the turn before)"
        if i < len(s.turns) - 1 and not t.assistant:
            return f"session {s.id!r} turn {i} has no recorded assistant answer, but turn {i + 1} sends it as history"
    return None


def _validate(trace: Trace, lines: _Lines) -> None:
    """Rules that span lines: content per turn, schedule references, phase names."""
    src = lines.source
    for s in trace.sessions:
        if problem := session_problem(s):
            raise TraceError(f"{src}:{lines.sessions.get(s.id, 0)}: {problem}")
    where = f"{src}:{lines.schedule}"
    turns = {s.id: len(s.turns) for s in trace.sessions}
    seen_phase: set[str] = set()
    seen_req: dict[tuple[str, int], str] = {}
    for p in trace.schedule.phases:
        if p.name in seen_phase:
            raise TraceError(f"{where}: phase name {p.name!r} is used twice")
        seen_phase.add(p.name)
        for sid, turn in p.requests:
            if sid not in turns:
                raise TraceError(f"{where}: phase {p.name!r} names unknown session {sid!r}")
            if not 0 <= turn < turns[sid]:
                raise TraceError(
                    f"{where}: phase {p.name!r} names turn {turn} of session {sid!r}, which has turns 0..{turns[sid] - 1}"
                )
            if (sid, turn) in seen_req:
                raise TraceError(f"{where}: {sid}/{turn} is scheduled twice (phases {seen_req[(sid, turn)]!r} and {p.name!r})")
            seen_req[(sid, turn)] = p.name
    for name in trace.schedule.restart_after:
        if name not in seen_phase:
            raise TraceError(f"{where}: restart_after names unknown phase {name!r}")


def validate(trace: Trace, source: str = "<trace>") -> None:
    """Validate a trace built in code; line numbers are those ``save_trace`` would write."""
    lines = _Lines(source, sessions={s.id: i + 2 for i, s in enumerate(trace.sessions)},
                   schedule=len(trace.sessions) + 2)
    first: dict[str, int] = {}
    for i, s in enumerate(trace.sessions):
        if not s.id or "/" in s.id:
            raise TraceError(f"{source}:{i + 2}: session id must be a non-empty string without '/', got {s.id!r}")
        if s.id in first:
            raise TraceError(f"{source}:{i + 2}: session id {s.id!r} already defined on line {first[s.id]}")
        first[s.id] = i + 2
    _validate(trace, lines)


# ---------------------------------------------------------------- writing


def dump_trace(trace: Trace) -> str:
    """The canonical JSONL text: fixed key order, compact, UTF-8; equal traces give equal bytes."""
    validate(trace, f"<trace {trace.name}>")
    p = trace.prefix
    out = [_line({"type": "header", "schema": SCHEMA, "name": trace.name,
                  "shared_prefix": {"system": p.system, "tools": list(p.tools), "persona": p.persona}})]
    for s in trace.sessions:
        # `expect` only when present: traces without expectations keep their bytes (and digest).
        turns = [{"user": t.user, "assistant": t.assistant, "tool_results": list(t.tool_results)}
                 | ({"expect": t.expect.to_json()} if t.expect is not None else {}) for t in s.turns]
        # `system` only when a session has its own: other traces keep their bytes (and digest).
        out.append(_line({"type": "session", "id": s.id, "turns": turns} | ({"system": s.system} if s.system is not None else {})))
    phases = [{"name": ph.name, "requests": [[sid, turn] for sid, turn in ph.requests]} for ph in trace.schedule.phases]
    out.append(_line({"type": "schedule", "phases": phases, "restart_after": list(trace.schedule.restart_after)}))
    return "".join(out)


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def save_trace(trace: Trace, path: Path | str) -> None:
    Path(path).write_text(dump_trace(trace), encoding="utf-8")


def trace_digest(trace: Trace) -> str:
    """sha256 of the canonical text: what a cell id should hash for a trace workload."""
    return hashlib.sha256(dump_trace(trace).encode("utf-8")).hexdigest()


def default_schedule(sessions: Sequence[Session], phase_size: int | None = None) -> Schedule:
    """Turn t of every session at once (phase ``turn-t``), as build_workload does.

    ``phase_size`` caps the requests per phase (``turn-t.0``, ``turn-t.1``, ...) for
    imports with thousands of sessions.
    """
    phases = []
    for t in range(max((len(s.turns) for s in sessions), default=0)):
        reqs = [(s.id, t) for s in sessions if t < len(s.turns)]
        if phase_size is None or len(reqs) <= phase_size:
            phases.append(Phase(f"turn-{t}", tuple(reqs)))
        else:
            for k in range(0, len(reqs), phase_size):
                phases.append(Phase(f"turn-{t}.{k // phase_size}", tuple(reqs[k:k + phase_size])))
    return Schedule(phases=tuple(phases))


# ---------------------------------------------------------------- replaying


def request_messages(trace: Trace, session: Session, turn: int, system: str | None = None) -> tuple[tuple[str, str], ...]:
    """The messages of one replayed request: prefix, recorded history, this turn's input."""
    system = trace.prefix.render() if system is None else system
    msgs: list[tuple[str, str]] = [("system", system)] if system else []
    for t in session.turns[:turn]:
        if t.user:
            msgs.append(("user", t.user))
        msgs.append(("assistant", t.assistant))
        msgs.extend(("tool", r) for r in t.tool_results)
    if session.turns[turn].user:
        msgs.append(("user", session.turns[turn].user))
    return tuple(msgs)


def trace_to_workload(trace: Trace, max_tokens: int, top_logprobs: int) -> Workload:
    """The replay of a trace, phase by phase; keys are ``<session>/<turn>``.

    ``trace.schedule.restart_after`` travels as ``Workload.restart_after``; the replay
    asks the caller that owns the engine to restart it after those phases.
    """
    validate(trace, f"<trace {trace.name}>")
    system = trace.prefix.render()
    by_id = {s.id: s for s in trace.sessions}
    phases = []
    for ph in trace.schedule.phases:
        reqs = tuple(
            ReplayRequest(key=f"{sid}/{turn}", session=sid, turn=turn, phase=ph.name,
                          messages=request_messages(trace, by_id[sid], turn,
                                                    system if by_id[sid].system is None else by_id[sid].system),
                          expect=by_id[sid].turns[turn].expect)
            for sid, turn in ph.requests
        )
        phases.append((ph.name, reqs))
    return Workload(name=trace.name, phases=tuple(phases), max_tokens=max_tokens, top_logprobs=top_logprobs,
                    restart_after=trace.schedule.restart_after)


# ---------------------------------------------------------------- synthesis


