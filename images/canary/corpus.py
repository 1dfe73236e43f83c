"""The canary's language: what it is trained on and what replays ask it.

Shared by the canary builder (run inside an engine venv, so: standard library only)
and by the replay workloads, so a replayed prompt is the training text and the model
answers it as it was trained to.

A system prompt defines identifiers (``var_0042 = alpha omega delta``), each user turn
names one, and the answer is its definition line, recited. To answer, the model must
find what the prefix said about that name, thousands of tokens back: a corrupted
carried state changes the answer. Names are four digits (10,000 of them, each defined
once a prompt, so the answer is defined at any length up to ~125k tokens) and the
tokenizer splits digits one by one, so every name is the same few tokens.
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
NAMES = 10000  # var_0000 .. var_9999
# Tokens a definition line takes with the canary's tokenizer (measured; tests/test_canary.py
# checks it against the shipped tokenizer): sizes a prefix from a token count.
TOKENS_PER_LINE = 12.5


def lines_for(prefix_tokens: int) -> int:
    """Definition lines of a system prompt about ``prefix_tokens`` long."""
    return min(NAMES, max(4, round(prefix_tokens / TOKENS_PER_LINE)))


def definitions(rng: random.Random, count: int) -> list[str]:
    if count > NAMES:
        raise ValueError(f"at most {NAMES} definitions (asked {count})")
    return [f"var_{n:04d} = " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6)))
            for n in rng.sample(range(NAMES), count)]


def system_prompt(rng: random.Random, lines: int) -> tuple[str, list[str]]:
    defs = definitions(rng, lines)
    tools = "tools: " + " ".join(TOOLS)
    return "\n".join([HEADER, tools, *defs]), defs


def user_turn(rng: random.Random, defs: list[str], turn: int) -> tuple[str, int]:
    i = rng.randrange(len(defs))
    name = defs[i].split(" = ")[0]
    return f"turn {turn}: {rng.choice(TOOLS)} then show {name}", i


def answer(defs: list[str], i: int) -> str:
    """The recorded (and expected) answer: the named definition line."""
    return defs[i]


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
