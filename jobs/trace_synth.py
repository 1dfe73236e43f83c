"""Synthetic traces (`vmatrix traces synth`): sessions of agent turns over a shared
prefix, with prose, code and tool output as filler, written in the trace format of
jobs/traces.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

from vmatrix.errors import TraceError
from vmatrix.images.canary import corpus
from vmatrix.jobs.traces import Phase, Schedule, Session, SharedPrefix, Trace, Turn, validate

MIX_KINDS = ("code", "tool", "prose")  # the kinds of user turn a synthetic session rotates through


def synth_trace(
    seed: int,
    sessions: int,
    turns: int,
    prefix_tokens: int,
    switches: int,
    mix: Iterable[str] = MIX_KINDS,
    name: str | None = None,
    restart_after: Sequence[str] = (),
) -> Trace:
    """A deterministic synthetic trace in the canary's language.

    The shared prefix is canary identifier definitions (about ``prefix_tokens``
    tokens of the canary tokenizer); every user turn ends with a canary recall line
    and every recorded answer recites the definitions, so the project's canary
    answers confidently. ``mix`` picks, in rotation, what each request carries
    besides the recall: a code snippet, tool output (the previous answer's tool
    results, sent as ``tool`` messages) or a prose paragraph.
    Sessions ``s0..`` run turn by turn; ``switches`` more sessions (agent
    switches) each send one turn alone on the warm prefix at the end.
    """
    kinds = tuple(mix)
    bad = [k for k in kinds if k not in MIX_KINDS]
    if bad or not kinds:
        raise TraceError(f"unknown mix kind {bad[0]!r} (known: {', '.join(MIX_KINDS)})" if bad else "empty mix")
    if sessions < 1 or turns < 1 or switches < 0 or prefix_tokens < 16:
        raise TraceError("need sessions >= 1, turns >= 1, switches >= 0, prefix_tokens >= 16")
    rng = random.Random(seed)
    defs = corpus.definitions(rng, corpus.lines_for(prefix_tokens))
    prefix = SharedPrefix(system=corpus.HEADER, tools=corpus.TOOLS, persona="\n".join(defs))
    names = [d.split(" = ", 1)[0] for d in defs]

    def session(s: int, n_turns: int) -> Session:
        out: list[Turn] = []
        for t in range(n_turns):
            kind = kinds[(s + t) % len(kinds)]
            recall, i = corpus.user_turn(rng, defs, t)
            user = recall
            if kind == "code":
                user = _code(rng, names) + "\n" + recall
            elif kind == "prose":
                user = _prose(rng) + "\n" + recall
            elif out:
                # Tool output this request carries: the previous answer's tool call result.
                out[-1] = replace(out[-1], tool_results=(_tool_output(rng, names, t),))
            else:
                user = _tool_output(rng, names, t) + "\n" + recall  # pasted by the user
            out.append(Turn(user=user, assistant=corpus.answer(defs, i)))
        return Session(id=f"s{s}", turns=tuple(out))

    all_sessions = [session(s, turns) for s in range(sessions)]
    all_sessions += [session(sessions + k, 1) for k in range(switches)]
    phases = [Phase(f"turn-{t}", tuple((f"s{s}", t) for s in range(sessions))) for t in range(turns)]
    phases += [Phase(f"switch-{k}", ((f"s{sessions + k}", 0),)) for k in range(switches)]
    unknown = [r for r in restart_after if r not in {p.name for p in phases}]
    if unknown:
        raise TraceError(f"restart_after names unknown phase {unknown[0]!r} (phases: {', '.join(p.name for p in phases)})")
    name = name or f"synth-seed{seed}-s{sessions}-t{turns}-p{prefix_tokens}-k{switches}-{'+'.join(kinds)}"
    trace = Trace(name=name, prefix=prefix, sessions=tuple(all_sessions),
                  schedule=Schedule(phases=tuple(phases), restart_after=tuple(restart_after)))
    validate(trace, f"<synth {name}>")
    return trace


_PROSE_TEXT = (
    "the agent keeps the session state in a cache and checks each value before it writes the result "
    "so that a later turn can read the same block again without a new query to the engine and the "
    "layer that holds the token list stays in sync with the file on disk while the build runs"
)


_PROSE = _PROSE_TEXT.split()


def _prose(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(2, 4)):
        start = rng.randrange(len(_PROSE) - 12)
        words = _PROSE[start:start + rng.randint(8, 12)] + [rng.choice(corpus.WORDS)]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def _code(rng: random.Random, names: list[str]) -> str:
    fn = rng.choice(corpus.TOOLS)
    a, b = rng.choice(names), rng.choice(names)
    body = [
        f"def {fn}_{a}(state):",
        f"    value = state.{rng.choice(corpus.WORDS)}({a!r})",
        f"    if value != state.get({b!r}):",
        f"        raise ValueError({(a + ' drifted from ' + b)!r})",
    ]
    for _ in range(rng.randint(0, 3)):
        body.append(f"    state.{rng.choice(corpus.WORDS)}({rng.choice(names)!r}, {rng.randint(0, 99)})")
    body.append("    return value")
    return "```python\n" + "\n".join(body) + "\n```"


def _tool_output(rng: random.Random, names: list[str], turn: int) -> str:
    kind = rng.choice(("run_tests", "search_code", "list_dir"))
    if kind == "run_tests":
        n = rng.randint(3, 8)
        rows = [f"tests/test_{rng.choice(corpus.WORDS)}.py::test_{rng.choice(names)} PASSED" for _ in range(n)]
        return "\n".join([f"$ run_tests turn {turn}", *rows, f"{n} passed in {rng.randint(1, 90) / 10}s"])
    if kind == "search_code":
        rows = [f"src/{rng.choice(corpus.WORDS)}.py:{rng.randint(1, 400)}: {rng.choice(names)} = "
                f"{rng.choice(corpus.WORDS)} {rng.choice(corpus.WORDS)}" for _ in range(rng.randint(2, 6))]
        return "\n".join([f"$ search_code {rng.choice(names)}", *rows])
    rows = [f"{rng.randint(100, 99999):>6} {rng.choice(corpus.WORDS)}_{rng.randint(0, 9)}.py" for _ in range(rng.randint(3, 8))]
    return "\n".join(["$ list_dir src", *rows])
