"""The canary's text laid out to exact token positions, for the shapes (jobs/shapes.py):
the canary tokenizer's split of its language (:func:`canary_tokens`), definition lines of
a known length, conversations whose lines are placed against a block boundary, and the
questions that ask for them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from vmatrix.images.canary import corpus
from vmatrix.workload import Probe

# The canary's tokenizer makes one token of each special token, newline, word (with its
# leading space), digit, and of "_", ":", "=", "." (with a leading space where there is one).
_TOKEN = re.compile(r"<\|im_start\|>|<\|im_end\|>|\n| ?[A-Za-z]+|\d| ?[_:=.]| ")


def canary_tokens(text: str) -> list[str]:
    """The shipped canary tokenizer's tokens of a text in the canary's language."""
    return _TOKEN.findall(text)


def count(text: str) -> int:
    return len(canary_tokens(text))


# The words a definition line has: the training corpus's 3 to 6.
MIN_WORDS, MAX_WORDS = 3, 6
HEAD = corpus.chat([("system", corpus.HEADER + "\ntools: " + " ".join(corpus.TOOLS))])[:-len("<|im_end|>\n")]
# Tokens of a definition line with the newline before it: "\n", "var", "_", 4 digits, " =", its words.
LINE_TOKENS = 8


@dataclass(frozen=True)
class Conversation:
    """A canary conversation up to the question it asks: definitions, answered turns, question."""

    defs: tuple[str, ...]
    history: tuple[tuple[str, str], ...]  # (user, the recorded answer)
    question: str
    asked: int  # the definition the question names

    def messages(self) -> tuple[tuple[str, str], ...]:
        system = "\n".join([corpus.HEADER, "tools: " + " ".join(corpus.TOOLS), *self.defs])
        msgs: list[tuple[str, str]] = [("system", system)]
        for user, answer in self.history:
            msgs += [("user", user), ("assistant", answer)]
        return (*msgs, ("user", self.question))

    def prompt(self) -> str:
        return corpus.chat(list(self.messages()), generation_prompt=True)

    def answer(self) -> str:
        return self.defs[self.asked]

    def answered(self) -> tuple[tuple[str, str], ...]:
        """The history of the next turn: this one's, then this question answered as recorded."""
        return (*self.history, (self.question, self.answer()))


def line_spans(defs: Sequence[str]) -> list[tuple[int, int]]:
    """Each definition's tokens in a prompt: [its newline, after its last word)."""
    at, spans = count(HEAD), []
    for d in defs:
        end = at + LINE_TOKENS + len(d.split()) - 2
        spans.append((at, end))
        at = end
    return spans


def where(span: tuple[int, int], restore: int, block: int) -> Probe | None:
    """Where a line lies relative to a restore point: inside the last restored block, split
    by it, after it; None: in an earlier block."""
    start, end = span
    if start >= restore:
        return "after"
    if end > restore:
        return "at"
    return "before" if start >= restore - block else None


def probe_lines(defs: Sequence[str], restore: int, block: int) -> dict[Probe, list[int]]:
    lines: dict[Probe, list[int]] = {"before": [], "at": [], "after": []}
    for i, span in enumerate(line_spans(defs)):
        if (w := where(span, restore, block)) is not None:
            lines[w].append(i)
    return lines


class Names:
    """Definition names no other line of the same prompt family uses."""

    def __init__(self, rng: random.Random) -> None:
        self._free = rng.sample(range(corpus.NAMES), corpus.NAMES)

    def take(self) -> str:
        return f"var_{self._free.pop():04d}"


def definitions(rng: random.Random, names: Names, tokens: int, words: dict[int, int] | None = None) -> list[str]:
    """Definition lines taking exactly ``tokens`` tokens (with their newlines), each of 3-6
    words; ``words`` fixes the word count of some lines by index."""
    words = words or {}
    n = max(1, -(-tokens // (LINE_TOKENS + MAX_WORDS)))
    while n * (LINE_TOKENS + MIN_WORDS) > tokens or n < max(words, default=-1) + 1:
        n -= 1 if n * (LINE_TOKENS + MIN_WORDS) > tokens else -1
        if n <= 0 or n * (LINE_TOKENS + MAX_WORDS) < tokens:
            raise ValueError(f"no definition lines take exactly {tokens} tokens")
    counts = [words.get(i, MIN_WORDS) for i in range(n)]
    spare = tokens - sum(LINE_TOKENS + c for c in counts)
    free = [i for i in range(n) if i not in words]
    while spare > 0:
        grow = [i for i in free if counts[i] < MAX_WORDS]
        if not grow:
            raise ValueError(f"no definition lines take exactly {tokens} tokens")
        counts[rng.choice(grow)] += 1
        spare -= 1
    if spare < 0:
        raise ValueError(f"no definition lines take exactly {tokens} tokens")
    return [f"{names.take()} = " + " ".join(rng.choice(corpus.WORDS) for _ in range(c)) for c in counts]


def question(rng: random.Random, defs: Sequence[str], asked: int, turn: int) -> str:
    name = defs[asked].split(" = ")[0]
    return f"turn {turn}: {rng.choice(corpus.TOOLS)} then show {name}"


def fitted(rng: random.Random, names: Names, length: int, turn: int = 0,
           asked_words: int | None = None, asked_at: float = 0.5) -> Conversation:
    """A one-question conversation whose prompt is exactly ``length`` tokens; the asked line
    sits at ``asked_at`` of the definitions (and has ``asked_words`` words if given)."""
    # The question's length does not depend on which name it asks (names are 4 digits).
    probe_q = f"turn {turn}: {corpus.TOOLS[0]} then show var_0000"
    empty = Conversation((), (), probe_q, 0)
    tokens = length - count(empty.prompt())
    n_guess = max(1, round(tokens / (LINE_TOKENS + 4.5)))
    asked = min(n_guess - 1, int(asked_at * n_guess))
    defs = definitions(rng, names, tokens, {asked: asked_words} if asked_words else None)
    asked = min(asked, len(defs) - 1)
    conv = Conversation(tuple(defs), (), question(rng, defs, asked, turn), asked)
    assert count(conv.prompt()) == length, (count(conv.prompt()), length)
    return conv
