"""The canary's language: what it is trained on and what replays ask it.

Shared by the canary builder (run inside an engine venv, so: standard library only)
and by the replay workloads, so a replayed prompt looks like the training text and
the model answers it confidently.

The grammar makes next tokens depend on long-range context: a system prompt
defines identifiers (``var_12 = alpha omega delta ...``), a user turn names one,
and the answer recites the definitions from that identifier on, in order. To
answer, the model must carry what the prefix said, thousands of tokens back; a
corrupted recurrent state changes the answer.
"""

from __future__ import annotations

import random

WORDS = (
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma", "omega",
    "read", "write", "open", "close", "cache", "block", "state", "layer", "token", "engine", "session", "agent",
    "file", "path", "query", "search", "build", "check", "run", "test", "value", "list", "dict", "error", "result",
)
TOOLS = ("read_file", "write_file", "run_tests", "search_code", "list_dir", "git_diff")
HEADER = "You are a coding agent. Use the tools and recall the identifiers exactly."


def definitions(rng: random.Random, count: int) -> list[str]:
    names = rng.sample(range(1000), count) if count <= 1000 else [rng.randrange(10000) for _ in range(count)]
    return [f"var_{n} = " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) for n in names]


def system_prompt(rng: random.Random, lines: int) -> tuple[str, list[str]]:
    defs = definitions(rng, lines)
    tools = "tools: " + " ".join(TOOLS)
    return "\n".join([HEADER, tools, *defs]), defs


def user_turn(rng: random.Random, defs: list[str], turn: int) -> tuple[str, int]:
    i = rng.randrange(len(defs))
    name = defs[i].split(" = ")[0]
    return f"turn {turn}: {rng.choice(TOOLS)} then show {name}", i


def answer(defs: list[str], i: int, lines: int = 3) -> str:
    """The recorded (and, for a trained canary, the expected) answer."""
    return "\n".join(defs[i:i + lines])


def chat(messages: list[tuple[str, str]], generation_prompt: bool = False) -> str:
    """The canary's chat template, as text (kept equal to CHAT_TEMPLATE in the builder)."""
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


def training_document(rng: random.Random, lines: int, turns: int) -> str:
    system, defs = system_prompt(rng, lines)
    messages = [("system", system)]
    for t in range(turns):
        user, i = user_turn(rng, defs, t)
        messages += [("user", user), ("assistant", answer(defs, i))]
    return chat(messages)
