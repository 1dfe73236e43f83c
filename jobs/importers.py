"""Turn logs people already have into ``vmatrix.trace/1`` traces.

Two sources: OpenAI chat-completions request logs (what an agent framework or a
proxy writes), and the datasets ``vllm bench serve`` reads (ShareGPT
conversations, ``custom`` JSONL prompts). Both are converted to recorded
sessions, so a replay of the trace sends exactly the recorded history and a cell
can be graded against its control. What cannot travel as chat text (structured
tool calls, images) is rendered as text or refused, never dropped silently.
Errors name ``FILE:LINE`` like the trace reader.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmatrix.expect import tool_arguments
from vmatrix.jobs.traces import (
    Session,
    SharedPrefix,
    Trace,
    TraceError,
    Turn,
    default_schedule,
    read_utf8,
    session_problem,
    validate,
)

Message = tuple[str, str]  # (role, text): role is user, assistant or tool after normalising


@dataclass(frozen=True)
class ImportReport:
    """What an import kept and left out, so the CLI can say it in one line."""

    requests: int  # request lines (openai) or conversations/prompts read
    sessions: int
    skipped: int  # left out: another shared prefix, retries, empty conversations
    note: str = ""


# ---------------------------------------------------------------- reading files


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, value) of a JSONL file, or of each element of a top-level JSON array."""
    text = read_utf8(path, "log")
    start = len(text) - len(text.lstrip())
    if text[start:start + 1] == "[":
        yield from _array(text, start + 1, path)
        return
    for n, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{n}: bad JSON ({exc.msg}, column {exc.colno}); truncated or corrupt file?") from None


def _array(text: str, i: int, path: Path) -> Iterator[tuple[int, Any]]:
    """Elements of a JSON array with the line each starts on (ShareGPT files are arrays)."""
    decoder = json.JSONDecoder()
    line, pos = 1, 0
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text):
            raise TraceError(f"{path}:{line + text.count(chr(10), pos, i)}: the JSON array is not closed (truncated file?)")
        if text[i] == "]":
            return
        line += text.count("\n", pos, i)
        pos = i
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{exc.lineno}: bad JSON ({exc.msg}, column {exc.colno}); truncated or corrupt file?") from None
        yield line, value


# ---------------------------------------------------------------- shared helpers


def _text(content: Any, where: str) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise TraceError(f"{where}: content part of type {kind!r} cannot be replayed as text")
        return "\n".join(parts)
    raise TraceError(f"{where}: message content must be a string or a list of parts")


def _tool_calls_text(calls: Any) -> str:
    """Assistant tool calls as the text Qwen/Hermes chat templates render them to."""
    out = []
    for call in calls or []:
        fn = (call or {}).get("function") or {}
        args = tool_arguments(fn.get("arguments", {}))
        out.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
                   + "\n</tool_call>")
    return "\n".join(out)


def segment_turns(messages: list[Message]) -> list[Turn]:
    """Cut a chat history into turns: user text, the assistant's answer, tool results.

    An assistant message ends a turn's input; tool messages after it are its tool
    results; the next user (or assistant) message starts a new turn. Consecutive
    user messages are joined by a blank line. A history that ends in tool output
    gets a last turn with no user text: that request is fed by the tools alone.
    """
    turns: list[Turn] = []
    user: list[str] = []
    answer: str | None = None
    tools: list[str] = []

    def close() -> None:
        turns.append(Turn(user="\n\n".join(user), assistant=answer or "", tool_results=tuple(tools)))

    for role, text in messages:
        if role == "assistant":
            if answer is not None:
                close()
                user, tools = [], []
            answer = text
        elif role == "tool" and answer is not None:
            tools.append(text)
        else:  # user, or tool output before any answer (pasted in by the user)
            if answer is not None:
                close()
                user, answer, tools = [], None, []
            user.append(text)
    if answer is not None:
        close()
        if tools:
            turns.append(Turn())
    elif user:
        close()
    return turns


def _unique_ids(raw: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for sid in raw:
        sid = sid.replace("/", "_") or "s"
        seen[sid] += 1
        out.append(sid if seen[sid] == 1 else f"{sid}-{seen[sid]}")
    return out


def _finish(name: str, prefix: SharedPrefix, sessions: list[Session], source: Path,
            phase_size: int | None) -> tuple[Trace, int, str]:
    """The trace of the sessions that can be replayed as recorded; the others are counted and the first named."""
    problems = [session_problem(s) for s in sessions]
    good = [s for s, p in zip(sessions, problems) if p is None]
    first = next((p for p in problems if p), "")
    if not good:
        raise TraceError(f"{source}: no session could be imported" + (f" (first problem: {first})" if first else ""))
    trace = Trace(name=name, prefix=prefix, sessions=tuple(good), schedule=default_schedule(good, phase_size))
    validate(trace, f"{source} (imported)")
    return trace, len(sessions) - len(good), (f"left out, e.g. {first}" if first else "")


# ---------------------------------------------------------------- OpenAI request logs


@dataclass
class _Request:
    line: int
    system: str
    tools: tuple[Any, ...]
    rest: tuple[Message, ...]
    answer: str | None  # the logged response, when the log has one


def _openai_request(obj: Any, where: str) -> _Request | None:
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected a request object")
    response = obj.get("response")
    body = obj.get("body") or obj.get("request") or obj
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise TraceError(f"{where}: no `messages` array (expected a chat-completions request body)")
    system: list[str] = []
    rest: list[Message] = []
    for m in body["messages"]:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise TraceError(f"{where}: every message needs a role")
        role, text = m["role"], _text(m.get("content"), where)
        if role in ("system", "developer") and not rest:
            system.append(text)
        elif role == "assistant":
            calls = _tool_calls_text(m.get("tool_calls"))
            rest.append(("assistant", "\n".join(t for t in (text, calls) if t)))
        elif role in ("tool", "function"):
            rest.append(("tool", text))
        else:
            rest.append(("user", text))
    if not rest:
        return None
    answer = None
    if isinstance(response, dict) and response.get("choices"):
        msg = response["choices"][0].get("message") or {}
        answer = "\n".join(t for t in (_text(msg.get("content"), where), _tool_calls_text(msg.get("tool_calls"))) if t)
    tools = tuple(body.get("tools") or ())
    return _Request(line=0, system="\n".join(system), tools=tools, rest=tuple(rest), answer=answer)


def import_openai(path: Path, name: str | None = None, group: int = 0,
                  phase_size: int | None = None) -> tuple[Trace, ImportReport]:
    """Sessions from a JSONL of chat-completions request bodies.

    Requests are grouped by their shared prefix (leading system/developer messages
    plus ``tools``); groups are numbered by size, largest first, and ``group`` picks
    one (a trace has one shared prefix). Within it, a request whose messages extend
    an earlier request's messages continues that session; any other starts a new
    session (an agent switch when it comes late). A line may also be
    ``{"request"|"body": {...}, "response": {...}}``; a logged response fills the
    answer of a session's last request. Repeated identical requests (retries) count once.
    """
    path = Path(path)
    requests: list[_Request] = []
    for line, obj in _records(path):
        req = _openai_request(obj, f"{path}:{line}")
        if req is not None:
            req.line = line
            requests.append(req)
    if not requests:
        raise TraceError(f"{path}: no chat-completions request with messages")
    def key(r: _Request) -> tuple[str, str]:
        return r.system, json.dumps(r.tools, sort_keys=True)

    sizes = Counter(key(r) for r in requests)
    order = sorted(sizes, key=lambda k: -sizes[k])  # stable: ties keep first appearance
    if not 0 <= group < len(order):
        raise TraceError("{path}: {group} {n} does not exist (the log has {count} shared prefixes, 0..{last})", path=path,
                         n=group, count=len(order), last=len(order) - 1)
    chosen = order[group]
    sessions: list[_Request] = []  # latest request of each session
    retries = 0
    for req in (r for r in requests if key(r) == chosen):
        best = None
        for i, s in enumerate(sessions):
            n = len(s.rest)
            if req.rest[:n] == s.rest and (best is None or n > len(sessions[best].rest)):
                best = i
        if best is not None and len(req.rest) == len(sessions[best].rest):
            retries += 1
            if req.answer is not None:
                sessions[best] = req
        elif best is not None:
            sessions[best] = req
        else:
            sessions.append(req)
    out = []
    for i, s in enumerate(sessions):
        turns = segment_turns(list(s.rest))
        if s.answer is not None and turns and not turns[-1].assistant:
            turns[-1] = Turn(user=turns[-1].user, assistant=s.answer, tool_results=turns[-1].tool_results)
        out.append(Session(id=f"s{i}", turns=tuple(turns)))
    system, tools = requests[[key(r) for r in requests].index(chosen)].system, chosen[1]
    prefix = SharedPrefix(system=system, tools=tuple(json.loads(tools)))
    trace, bad, why = _finish(name or path.stem, prefix, out, path, phase_size)
    other = len(requests) - sizes[chosen]
    notes = [f"{len(order) - 1} other shared prefixes ({other} requests) left out; pick one with --group" if other else "",
             f"{retries} repeated requests counted once" if retries else "", f"{bad} sessions {why}" if bad else ""]
    return trace, ImportReport(requests=len(requests), sessions=len(trace.sessions), skipped=other + retries + bad,
                               note="; ".join(n for n in notes if n))


# ---------------------------------------------------------------- vLLM bench datasets

_SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
    "system": "system",
    "tool": "tool", "function": "tool", "function_response": "tool", "observation": "tool",
}


def import_sharegpt(path: Path, name: str | None = None, system: str | None = None, limit: int | None = None,
                    phase_size: int | None = None) -> tuple[Trace, ImportReport]:
    """Sessions from ShareGPT conversations (``vllm bench serve --dataset-name sharegpt``).

    JSON array or JSONL of ``{"id"?, "conversations": [{"from": "human"|"gpt"|..., "value"}]}``.
    The shared prefix is ``system`` if given, else the most common in-conversation
    system message (none in plain ShareGPT); conversations with another system
    message are left out. Leading ``gpt`` messages (no question before them) are dropped.
    """
    path = Path(path)
    convs: list[tuple[str, str | None, list[Message]]] = []
    read = skipped = 0
    for line, obj in _records(path):
        if limit is not None and len(convs) >= limit:
            break
        where = f"{path}:{line}"
        read += 1
        msgs = obj.get("conversations") if isinstance(obj, dict) else None
        if not isinstance(msgs, list):
            raise TraceError(f"{where}: expected {{\"conversations\": [{{\"from\": ..., \"value\": ...}}]}}")
        sys_text: str | None = None
        rest: list[Message] = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("from"), str):
                raise TraceError(f"{where}: every conversation entry needs `from` and `value`")
            role = _SHAREGPT_ROLES.get(m["from"].lower())
            if role is None:
                raise TraceError(f"{where}: unknown speaker {m['from']!r} (known: {', '.join(sorted(_SHAREGPT_ROLES))})")
            text = _text(m.get("value"), where)
            if role == "system":
                sys_text = text
            elif role == "assistant" and not any(r == "user" for r, _ in rest):
                continue
            else:
                rest.append((role, text))
        if not any(r == "user" and t.strip() for r, t in rest):
            skipped += 1
            continue
        convs.append((str(obj.get("id", f"s{len(convs)}")), sys_text, rest))
    if system is None:
        common = Counter(s for _, s, _ in convs if s).most_common(1)
        system = common[0][0] if common else ""
    kept = [(cid, rest) for cid, s, rest in convs if not s or s == system]
    skipped += len(convs) - len(kept)
    ids = _unique_ids([cid for cid, _ in kept])
    sessions = [Session(id=sid, turns=tuple(segment_turns(rest))) for sid, (_, rest) in zip(ids, kept)]
    trace, bad, why = _finish(name or path.stem, SharedPrefix(system=system), sessions, path, phase_size)
    note = f"{bad} sessions {why}" if bad else ""
    return trace, ImportReport(requests=read, sessions=len(trace.sessions), skipped=skipped + bad, note=note)


def import_vllm_custom(path: Path, name: str | None = None, system: str | None = None, limit: int | None = None,
                       phase_size: int | None = None) -> tuple[Trace, ImportReport]:
    """One single-turn session per ``{"prompt": ...}`` line (``--dataset-name custom``).

    Custom prompts share nothing by themselves; give ``system`` to put a shared
    prefix in front of all of them.
    """
    path = Path(path)
    prompts: list[str] = []
    skipped = 0
    for line, obj in _records(path):
        if limit is not None and len(prompts) >= limit:
            break
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise TraceError(f"{path}:{line}: expected {{\"prompt\": \"...\"}}")
        if obj["prompt"].strip():
            prompts.append(obj["prompt"])
        else:
            skipped += 1
    sessions = [Session(id=f"p{i}", turns=(Turn(user=p),)) for i, p in enumerate(prompts)]
    trace, _, _ = _finish(name or path.stem, SharedPrefix(system=system or ""), sessions, path, phase_size)
    return trace, ImportReport(requests=len(prompts) + skipped, sessions=len(trace.sessions), skipped=skipped)


IMPORTERS: dict[str, Callable[..., tuple[Trace, ImportReport]]] = {
    "openai": import_openai,
    "sharegpt": import_sharegpt,
    "vllm-custom": import_vllm_custom,
}
