"""What a request's answer should be: ground truth to grade recall against.

A canary workload knows the answer it asks for (``corpus.answer`` for the named
identifier); a trace turn may say what it expects (docs/traces.md). One small value,
shared by the workload, the replay's records, the store and the grader:

- ``exact``: the answer, compared with the model's answer after stripping surrounding
  whitespace;
- ``regex``: a pattern the whole (stripped) answer must match (``re.fullmatch``; write
  ``(?s).*`` around it to allow more text);
- ``tool_call``: the answer's first tool call, in the Qwen/Hermes text form
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, has this name and
  these arguments, compared as parsed JSON (key order and spacing do not matter).

The model's answer is the text it wrote before its first end-of-turn token
(:attr:`vmatrix.records.RequestRecord.answer_chars`); an answer cut by ``max_tokens``
before that token is wrong whatever its text.

JSON form (a trace's ``expect``, the store's ``requests.expect``, the workload digest):
``{"exact": TEXT}``, ``{"regex": PATTERN}``, ``{"tool_call": {"name": NAME, "arguments": {...}}}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["exact", "regex", "tool_call"]
KINDS: tuple[Kind, ...] = ("exact", "regex", "tool_call")

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Expectation:
    kind: Kind
    # exact: the expected answer; regex: the pattern; tool_call: the tool's name.
    value: str
    # tool_call only: the arguments as canonical JSON (sorted keys, compact), so the
    # value stays hashable and equal arguments are equal strings.
    arguments: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown expectation kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind == "regex":
            re.compile(self.value)  # a bad pattern fails where it is written, not when graded
        if self.kind == "tool_call" and self.arguments is None:
            object.__setattr__(self, "arguments", _canonical({}))

    @classmethod
    def exact(cls, text: str) -> Expectation:
        return cls("exact", text)

    @classmethod
    def regex(cls, pattern: str) -> Expectation:
        return cls("regex", pattern)

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any] | None = None) -> Expectation:
        return cls("tool_call", name, _canonical(arguments or {}))

    def matches(self, answer: str | None) -> bool:
        """Whether an answer (None: the model never finished it) is right."""
        if answer is None:
            return False
        if self.kind == "exact":
            return answer.strip() == self.value.strip()
        if self.kind == "regex":
            return re.fullmatch(self.value, answer.strip()) is not None
        calls = tool_calls(answer)
        return bool(calls) and calls[0] == (self.value, json.loads(self.arguments or "{}"))

    def to_json(self) -> dict[str, Any]:
        if self.kind == "tool_call":
            return {"tool_call": {"name": self.value, "arguments": json.loads(self.arguments or "{}")}}
        return {self.kind: self.value}

    @classmethod
    def from_json(cls, data: Any) -> Expectation:
        """The JSON form back; a bare string is an exact answer. Raises ValueError, one line."""
        if isinstance(data, str):
            return cls.exact(data)
        if not isinstance(data, dict) or len(data) != 1:
            raise ValueError('expect must be a string or one of {"exact": TEXT}, {"regex": PATTERN}, '
                             '{"tool_call": {"name": NAME, "arguments": {...}}}')
        [(kind, value)] = data.items()
        if kind in ("exact", "regex"):
            if not isinstance(value, str):
                raise ValueError(f"expect.{kind} must be a string")
            try:
                return cls(kind, value)
            except re.error as exc:
                raise ValueError(f"expect.regex: bad pattern ({exc})") from None
        if kind == "tool_call":
            if not isinstance(value, dict) or not isinstance(value.get("name"), str) or set(value) - {"name", "arguments"}:
                raise ValueError('expect.tool_call must be {"name": NAME, "arguments": {...}}')
            arguments = value.get("arguments", {})
            if not isinstance(arguments, dict):
                raise ValueError("expect.tool_call.arguments must be a JSON object")
            return cls.tool_call(value["name"], arguments)
        raise ValueError(f"unknown expectation kind {kind!r} (known: {', '.join(KINDS)})")


def tool_calls(text: str) -> list[tuple[str, Any]]:
    """The ``<tool_call>{...}</tool_call>`` blocks of a text as (name, parsed arguments), in
    order; a block that is not a JSON object with a string ``name`` is left out (a model
    that writes broken JSON made no call). Arguments given as a JSON string (some
    templates encode them so) are parsed too."""
    out = []
    for block in _TOOL_CALL.findall(text):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        out.append((call["name"], tool_arguments(call.get("arguments", {}))))
    return out


def tool_arguments(arguments: Any) -> Any:
    """A tool call's arguments as JSON values: OpenAI sends them as a JSON string, chat
    templates render them as an object; a string that is not JSON stays as it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments
