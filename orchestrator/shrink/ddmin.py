"""Zeller's ddmin over units, with the test a caller's: does this set of units still fail?

Each test here is an engine run or several, so two things differ from the textbook: the
first granularity may be finer than 2 (``start``: with few units, try each alone first,
as a repeat of a race often fails by itself), and each distinct set is tested once
(``seen``; the probes are recorded too, so a re-run of the whole shrink reads them back).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def _chunks(items: Sequence[T], n: int) -> list[list[T]]:
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(list(items[at:at + step]))
        at += step
    return [c for c in out if c]


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool], start: int = 2, monotone: bool = True) -> list[T]:
    """A 1-minimal sublist of ``items`` (which must fail) that still ``fails``: removing any
    one of its items makes it pass (as far as the test says). Order is kept.

    ``monotone``: a part of a set that passed is taken to pass without a test (a race of
    fewer prompts splits less). ddmin's next finer step after two halves passed tests
    quarters, each inside a half that passed: four probes (twelve engine runs) that a race
    would not fail; complements are still tested."""
    current = list(items)
    n = max(2, min(start, len(current)))
    seen: dict[tuple[int, ...], bool] = {}
    passed: list[set[int]] = []
    index = {id(x): i for i, x in enumerate(items)}

    def test(candidate: list[T]) -> bool:
        key = tuple(index[id(x)] for x in candidate)
        if key not in seen:
            if monotone and any(set(key) <= p for p in passed):
                return False
            seen[key] = fails(candidate)
            if not seen[key]:
                passed.append(set(key))
        return seen[key]

    while len(current) >= 2:
        chunks = _chunks(current, n)
        reduced = False
        for chunk in chunks:  # one chunk alone
            if test(chunk):
                current, n, reduced = chunk, 2, True
                break
        if not reduced and len(chunks) > 2:
            for i in range(len(chunks)):  # everything but one chunk
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if test(rest):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current
