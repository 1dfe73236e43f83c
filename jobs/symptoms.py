"""Symptom detectors: what broken serving looks like in a real model's output.

Token-exact grading (jobs/grade.py) says *whether* a cell's output left the
control's; these detectors say whether what it produced instead looks broken, and
they catch damage the control comparison cannot (a cell-level counter such as spec
decode acceptance). Pure functions over one request's text and token ids, or a
cell's per-phase ``/metrics`` deltas (``Transcript.metrics``); no I/O.

Every detector is blind to intent: a tiny canary loops and a code model prints
digits. So a symptom is only held against a cell relative to its control
(:func:`blamed`): a kind of symptom the control shows anywhere in the same workload
is normal for that model and workload, and is reported but not blamed.

Thresholds are module constants, each with why it sits where it does; they are
tuned to fire on degenerate output, not on odd but plausible text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import regex

from vmatrix import speed
from vmatrix.records import RequestRecord, Transcript

# --- thresholds -----------------------------------------------------------------------

# U+FFFD is what a detokenizer emits for invalid UTF-8: a byte-level BPE model whose
# state is corrupt produces broken multi-byte sequences steadily. One at the very end is
# legitimate (a character cut in half by max_tokens), so a trailing one is not counted,
# and two in a long answer are still noise; a corrupt stack produces many.
REPLACEMENT_MIN_COUNT = 3
REPLACEMENT_MIN_RATIO = 0.01  # of the text's characters

# Mixed-script salad: words whose letters come from several scripts ("cлово", "日本語abc")
# do not occur in written language outside of handles and identifiers; a few are fine,
# many are the classic signature of a model reading garbage state. Han, Hiragana and
# Katakana together are ordinary Japanese, so they count as one script here.
SALAD_MIN_WORDS = 3
SALAD_MIN_FRACTION = 0.10  # of words with at least two letters
# A line using this many scripts is salad even if each word is pure (bilingual text and
# maths with Greek letters use two or three).
SALAD_LINE_SCRIPTS = 4
SCRIPTS = ("Latin", "Cyrillic", "Greek", "Han", "Hiragana", "Katakana", "Hangul", "Arabic", "Hebrew",
           "Devanagari", "Thai", "Armenian", "Georgian", "Bengali", "Tamil", "Ethiopic")
_SAME_SCRIPT = {"Hiragana": "Han", "Katakana": "Han"}

# n-gram loop: the output ends in a block of at most LOOP_MAX_PERIOD tokens repeated
# over at least LOOP_MIN_TOKENS tokens and LOOP_MIN_REPEATS times. Degenerate loops run
# to max_tokens, hence the tail. Lists and tables repeat structure but not exact
# token blocks this long; 32 tokens is longer than any repeated phrase in prose.
LOOP_MAX_PERIOD = 16
LOOP_MIN_TOKENS = 32
LOOP_MIN_REPEATS = 4

# Digit loop: a run of digits (separators allowed) that is periodic with a short
# period, e.g. "0000000000..." or "1, 2, 1, 2, 1, 2, ...". Long numbers are fine (pi,
# hashes, counting up 1 2 3 ... is not periodic); a short digit pattern repeated this
# many digits is a stuck decoder.
DIGIT_LOOP_MIN_DIGITS = 24
DIGIT_LOOP_MAX_PERIOD = 8

# Tags that belong to the chat template or the tool-call parser, never to content: when
# they appear in `content`, special tokens were decoded as text or the parser lost track.
TAG_LEAK = regex.compile(r"</?tool_call>|<\|[A-Za-z0-9_]+\|>|\[/?TOOL_CALLS\]|\[/?INST\]|<function=")

# Speculative decoding acceptance over the whole replay. At or above 99%, drafts are
# accepted unchecked, which greedy verification of a different model does not do. At or
# below 2% (vmatrix/speed.py) the drafter is not helping: a speed finding, reported beside
# the verdict and never graded, since verification keeps every answer the target's own.
ACCEPTANCE_LOW = speed.ACCEPTANCE_LOW
ACCEPTANCE_HIGH = 0.99
ACCEPTANCE_MIN_DRAFTS = speed.ACCEPTANCE_MIN_DRAFTS
DRAFT_TOKENS = speed.DRAFT_TOKENS
ACCEPTED_TOKENS = speed.ACCEPTED_TOKENS

# Symptom kinds; `acceptance_*` are cell-level, the rest per request.
KINDS = ("replacement_chars", "script_salad", "ngram_loop", "digit_loop", "empty_length", "tag_leak",
         "acceptance_low", "acceptance_high")
CELL_KINDS = ("acceptance_low", "acceptance_high")
# Kinds about speed, not answers: in the evidence's "speed", never held against a cell.
SPEED_KINDS = ("acceptance_low",)


@dataclass(frozen=True)
class Symptom:
    kind: str
    detail: str
    key: str | None = None  # request key; None for cell-level symptoms
    session: str | None = None
    turn: int | None = None
    token_index: int | None = None  # where it starts, when a token position is known
    excerpt: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- per-request detectors ----------------------------------------------------------------


def replacement_chars(text: str) -> str | None:
    body = text.removesuffix("\ufffd")
    count = body.count("\ufffd")
    if count >= REPLACEMENT_MIN_COUNT and count >= REPLACEMENT_MIN_RATIO * max(len(body), 1):
        return f"{count} U+FFFD in {len(text)} characters"
    return None


_SCRIPT_RES = {name: regex.compile(rf"\p{{Script={name}}}") for name in SCRIPTS}
_WORD = regex.compile(r"\p{L}[\p{L}\p{M}]+")


def _scripts(text: str) -> set[str]:
    return {_SAME_SCRIPT.get(name, name) for name, pattern in _SCRIPT_RES.items() if pattern.search(text)}


def script_salad(text: str) -> str | None:
    words = _WORD.findall(text)
    mixed = [w for w in words if len(_scripts(w)) > 1]
    if len(mixed) >= SALAD_MIN_WORDS and len(mixed) >= SALAD_MIN_FRACTION * len(words):
        return f"{len(mixed)}/{len(words)} words mix scripts, e.g. {' '.join(mixed[:3])!r}"
    for line in text.splitlines():
        scripts = _scripts(line)
        if len(scripts) >= SALAD_LINE_SCRIPTS:
            return f"one line mixes {len(scripts)} scripts ({', '.join(sorted(scripts))}): {line[:60]!r}"
    return None


def ngram_loop(tokens: Sequence[int]) -> tuple[int, int] | None:
    """(start index, period) of a loop the output ends in, or None."""
    n = len(tokens)
    best: tuple[int, int] | None = None
    for period in range(1, min(LOOP_MAX_PERIOD, n // 2) + 1):
        start = n - period
        while start > 0 and tokens[start - 1] == tokens[start - 1 + period]:
            start -= 1
        span = n - start
        if span >= max(LOOP_MIN_TOKENS, LOOP_MIN_REPEATS * period) and (best is None or start < best[0]):
            best = (start, period)
    return best


_NUMERIC_RUN = regex.compile(r"\d[\d\s,.;:/\-]*\d")


def digit_loop(text: str) -> str | None:
    for match in _NUMERIC_RUN.finditer(text):
        digits = regex.sub(r"\D", "", match.group())
        if len(digits) < DIGIT_LOOP_MIN_DIGITS:
            continue
        for period in range(1, DIGIT_LOOP_MAX_PERIOD + 1):
            if all(digits[i] == digits[i - period] for i in range(period, len(digits))):
                return f"{len(digits)} digits repeating {digits[:period]!r}"
    return None


def empty_length(text: str, finish_reason: str | None, n_tokens: int) -> str | None:
    # Tokens were generated up to the limit, yet no content came out: all of them were
    # special tokens, whitespace, or text the server swallowed.
    if finish_reason == "length" and n_tokens > 0 and not text.strip():
        return f"{n_tokens} tokens generated, content empty, finish_reason=length"
    return None


def tag_leak(text: str) -> str | None:
    found = TAG_LEAK.findall(text)
    if found:
        return f"{len(found)} template/tool tag(s) in content: {', '.join(sorted(set(found))[:4])}"
    return None


def request_symptoms(rec: RequestRecord) -> list[Symptom]:
    """Every symptom one request's output shows (failed requests show none: they are errors)."""
    if rec.error:
        return []
    where = {"key": rec.key, "session": rec.session, "turn": rec.turn}
    found: list[Symptom] = []
    for kind, detail in (
        ("replacement_chars", replacement_chars(rec.text)),
        ("script_salad", script_salad(rec.text)),
        ("digit_loop", digit_loop(rec.text)),
        ("empty_length", empty_length(rec.text, rec.finish_reason, len(rec.token_ids))),
        ("tag_leak", tag_leak(rec.text)),
    ):
        if detail:
            found.append(Symptom(kind, detail, excerpt=rec.text[-120:], **where))
    if loop := ngram_loop(rec.token_ids):
        start, period = loop
        found.append(Symptom("ngram_loop", f"last {len(rec.token_ids) - start} tokens repeat a {period}-token block",
                             token_index=start, excerpt=rec.text[-120:], **where))
    return found


# --- cell-level detectors -----------------------------------------------------------------


def acceptance(metrics: Mapping[str, Mapping[str, float]]) -> tuple[float, float] | None:
    """(accepted, drafted) tokens over all phases, or None if nothing was drafted."""
    return speed.draft_counts({name: sum(phase.get(name, 0.0) for phase in metrics.values())
                               for name in (DRAFT_TOKENS, ACCEPTED_TOKENS)})


def acceptance_symptoms(metrics: Mapping[str, Mapping[str, float]]) -> list[Symptom]:
    counts = acceptance(metrics)
    if counts is None or counts[1] < ACCEPTANCE_MIN_DRAFTS:
        return []
    accepted, drafted = counts
    rate = accepted / drafted
    detail = speed.acceptance_detail(accepted, drafted)
    if rate <= ACCEPTANCE_LOW:
        return [Symptom("acceptance_low", detail)]
    if rate >= ACCEPTANCE_HIGH:
        return [Symptom("acceptance_high", detail)]
    return []


def transcript_symptoms(tx: Transcript) -> list[Symptom]:
    """What the grader holds against a cell's answers: every kind but the speed ones."""
    found = [s for r in tx.requests for s in request_symptoms(r)] + acceptance_symptoms(tx.metrics)
    return [s for s in found if s.kind not in SPEED_KINDS]


def speed_findings(tx: Transcript) -> list[Symptom]:
    """Findings about the cell's speed (draft acceptance stuck near 0%): shown, not graded."""
    return [s for s in acceptance_symptoms(tx.metrics) if s.kind in SPEED_KINDS]


# --- relative to the control ----------------------------------------------------------------


@dataclass(frozen=True)
class SymptomReport:
    blamed: list[Symptom]  # shown by the cell, of a kind its control never shows
    excused: list[Symptom]  # shown by the cell, but the control shows that kind too (or ignored)
    control_kinds: list[str]


def blamed(cell: Iterable[Symptom], control: Iterable[Symptom], ignore: Iterable[str] = ()) -> SymptomReport:
    """Split the cell's symptoms into blamed and excused.

    A kind the control shows in any request of the same workload is normal for this model
    (a tiny canary loops; a reasoning model hits the length limit with empty content)
    and is excused everywhere, not only in the request where the control showed it: with a
    handful of requests a per-request comparison would blame noise on whichever cell
    tie-flipped into it. ``ignore`` names kinds that are never blamed (known limits of the
    model, e.g. an untrained draft head).
    """
    control_kinds = sorted({s.kind for s in control})
    skip = set(control_kinds) | set(ignore)
    mine = list(cell)
    return SymptomReport([s for s in mine if s.kind not in skip], [s for s in mine if s.kind in skip], control_kinds)
