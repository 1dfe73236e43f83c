"""Workload shapes: canary requests laid out on the engine's blocks, where the field's
corruption lives (shared/DOMAIN.md, "Upstream bugs on the hit path").

A hybrid engine in align mode keeps the recurrent state only at block boundaries, and a
prefix-cache hit restores the state of its last full block. What goes wrong happens at
those boundaries, so each shape places its prompts relative to the engine's block ``B``
(learned from the engine when it starts; ``probe_block_tokens`` overrides it) and sends
them with the concurrency that makes prefills share the token budget:

- ``cold_race`` (vLLM issue 43559, fixed by PR 51113): cold prompts of 1.05-1.95 blocks
  sent at once, so a budget smaller than their sum fragments them and a chunk can end
  mid-block; then each is sent again with its answer and a new question, restoring the
  state published at ``B``. ``identical: true`` sends one prompt that many times (vLLM's
  own test: 16 identical prompts of about 1.35 blocks).
- ``decode_cross`` (the multi-turn wave of vLLM's test): prompts a few tokens short of
  ``2B``, so the answer's decode crosses the boundary; then prompt + answer + a question
  about the block before it, restoring the state decode published at ``2B``.
- ``spec_tail`` (issue 55766): prompts of ``mB + t`` tokens sent twice; the second hits
  ``mB`` and its last prefill chunk is ``t`` = 1 + k tokens (k: draft tokens) past it.
- ``agent`` (issue 53912 lives on these hits): sessions of turns over a long shared prefix
  and agent switches onto it, each turn resending the history.
- ``unique_tail`` (issue 45238): a shared prefix that ends mid-block followed by a tail of
  more than a block of each request's own, so the align checkpoint lands in tokens no
  other request has; a second wave shares only the prefix.

Every request that reads a restored state asks for a line that state carries: lines whose
words lie in the last restored block (``before``), the line the restore point splits
(``at``) and lines computed after it (``after``): on vLLM 0.25.1 with MTP the lines
inside the last restored block were lost while the split line survived
(shared/ENGINES.md). Each request carries a :class:`vmatrix.workload.Claim` (its length,
the restore point a hit should reach, the boundary its decode should cross) that the
grader checks against what the engine reports.

Token positions are exact: ``shape_text.canary_tokens`` is the shipped canary tokenizer's split
of the corpus language (tests/test_shapes.py holds it, and every shape's claims, to the
real tokenizer at blocks of 144 and 384).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Literal, Protocol

from vmatrix.expect import Expectation
from vmatrix.jobs.shape_text import (
    HEAD,
    LINE_TOKENS,
    MAX_WORDS,
    MIN_WORDS,
    Conversation,
    Names,
    canary_tokens,
    count,
    definitions,
    fitted,
    line_spans,
    probe_lines,
    question,
    where,
)
from vmatrix.workload import Claim, Probe, ReplayRequest

# What the builders below make of a spec. A cell's id holds its shaped workload's spec, not
# its requests (those depend on the engine's block), so a change to what the builders
# send must bump this: the cell is then another cell, not a recorded one run differently.
# A run records the version it was laid out by (vmatrix.records.Layout), and a regrade
# rebuilds its requests by that version.
#   1: asked lines placed against the restore point prefix caching alone reaches.
#   2: also against the one a speculative engine reaches, a block lower (``block_drop``:
#      twins of the requests that restore, a cold race of prompts a block longer, spec
#      tails one block further), and ``repeat``.
LAYOUT_VERSION = 2

ShapeKind = Literal["cold_race", "decode_cross", "spec_tail", "agent", "unique_tail"]
SHAPE_KINDS: tuple[ShapeKind, ...] = ("cold_race", "decode_cross", "spec_tail", "agent", "unique_tail")

class ShapeParams(Protocol):
    """One entry of a workload's ``shapes:`` (``orchestrator.spec`` validates them); each
    kind reads the fields it has."""

    @property
    def kind(self) -> ShapeKind: ...
    @property
    def name(self) -> str: ...


Phase = tuple[str, tuple[ReplayRequest, ...]]
Builder = Callable[[ShapeParams, int, random.Random, "random.Random | None"], list[Phase]]

def _request(shape: str, session: str, turn: int, phase: str, conv: Conversation, claim: Claim) -> ReplayRequest:
    claim = replace(claim, asked=line_spans(conv.defs)[conv.asked])
    return ReplayRequest(key=f"{session}/{turn}", session=session, turn=turn, phase=phase, messages=conv.messages(),
                         expect=Expectation.exact(conv.answer()), shape=shape, claim=claim)


def _probe_cycle(n: int) -> Iterator[Probe]:
    order: tuple[Probe, ...] = ("before", "at", "after")
    for i in range(n):
        yield order[i % len(order)]


def _inside_cycle() -> Iterator[Probe]:
    """What requests laid out for a speculative engine's restore point ask: the lines that
    state carries (the ones after it are asked by the requests laid out for a block higher)."""
    while True:
        yield "before"
        yield "at"


def _twin(drop: random.Random, shape: str, session: str, turn: int, phase: str, defs: tuple[str, ...],
          history: tuple[tuple[str, str], ...], restore: int, block: int, want: Probe,
          exclude: set[int]) -> tuple[ReplayRequest, Conversation] | None:
    """The request a speculative engine's block drop needs beside one laid out to restore
    ``restore``: the same history, asking a line against the restore point a block lower
    (where that engine's hit lands); None when a block lower is no hit at all. Its claim
    keeps ``restore`` as the hit, so coverage counts a hit a block lower under speculative
    decoding as the designed drop."""
    if restore - block < block:
        return None
    conv, probe = _ask(drop, defs, history, restore - block, block, want, turn, exclude)
    return _request(shape, f"{session}.drop", turn, phase, conv,
                    Claim(count(conv.prompt()), hit_at=restore, probe=probe)), conv


def _ask(rng: random.Random, defs: tuple[str, ...], history: tuple[tuple[str, str], ...], restore: int,
         block: int, want: Probe, turn: int, exclude: set[int]) -> tuple[Conversation, Probe | None]:
    """A conversation asking, after ``history``, a line at ``want`` relative to ``restore``
    (the nearest position that has a line not asked yet, if none is there)."""
    lines = probe_lines(defs, restore, block)
    for pos in (want, "before", "at", "after"):
        free = [i for i in lines[pos] if i not in exclude]  # type: ignore[index]
        if free:
            i = free[-1] if pos == "before" and rng.random() < 0.5 else rng.choice(free)
            return Conversation(defs, history, question(rng, defs, i, turn), i), pos  # type: ignore[return-value]
    i = rng.choice([i for i in range(len(defs)) if i not in exclude])
    return Conversation(defs, history, question(rng, defs, i, turn), i), None


def restore_point(prompt: str, cached: Sequence[Sequence[str]], block: int) -> int:
    """The block boundary a prompt's cache hit can reach, given token lists that earlier
    requests left in the cache: vLLM hits full blocks only, and never the whole prompt."""
    tokens = canary_tokens(prompt)
    best = max((_common(tokens, c) for c in cached), default=0)
    return min(best, len(tokens) - 1) // block * block


def _asked_before(conv: Conversation) -> set[int]:
    return {conv.asked} | {conv.defs.index(answer) for _, answer in conv.history}


# --- the shapes ---------------------------------------------------------------------------------


def race_lengths(p: ShapeParams, block: int, extra: int = 0) -> list[int]:
    """A cold_race shape's prompt lengths in the order they are sent: spread over ``blocks``
    blocks (``extra`` more each: the race laid out for the block drop), or all the middle
    one when ``identical``."""
    lo, hi = (b + extra for b in p.blocks)  # type: ignore[attr-defined]
    n: int = p.prompts  # type: ignore[attr-defined]
    if p.identical:  # type: ignore[attr-defined]
        return [round(block * (lo + hi) / 2)] * n
    return [round(block * (lo + (hi - lo) * i / max(1, n - 1))) for i in range(n)]


def fragments(p: ShapeParams, block: int, budget: int | None, max_num_seqs: int | None,
              long: bool = False) -> bool | None:
    """Whether a cold_race shape's prompts, sent at once, overrun the engine's token budget
    per step, so that their prefills are split into chunks and one can end mid-block (the
    scheduler takes at most ``max_num_seqs`` at a time), in its race or, with ``long``, in
    its race of prompts a block longer too; None when the budget is not known."""
    if budget is None:
        return None
    waves = [race_lengths(p, block)] + ([race_lengths(p, block, 1)] if long else [])
    return any(sum(lengths[:max_num_seqs or len(lengths)]) > budget for lengths in waves)


def cold_race(p: ShapeParams, block: int, rng: random.Random, drop: random.Random | None = None) -> list[Phase]:
    """Cold prompts of ``blocks`` blocks at once, then each again with its answer and a
    question about a line before, at or after the restore point ``block``. With ``drop``,
    then the same race with prompts a block longer, whose resends a speculative engine
    still hits after its block drop (at ``block``, where prefix caching alone hits
    ``2 * block``): they ask lines inside the first block."""
    names = Names(rng)
    phases = _race(p, block, rng, names, race_lengths(p, block), "", _probe_cycle(p.prompts))  # type: ignore[attr-defined]
    if drop is not None:
        phases += _race(p, block, drop, names, race_lengths(p, block, 1), "-long", _inside_cycle())
    return phases


def _race(p: ShapeParams, block: int, rng: random.Random, names: Names, lengths: list[int], tag: str,
          wants: Iterator[Probe]) -> list[Phase]:
    """One cold race and its resends: ``lengths`` sent at once, then each asking a line
    against the restore point a block below its prompt's last full one."""
    if p.identical:  # type: ignore[attr-defined]
        firsts = [fitted(rng, names, lengths[0])] * len(lengths)
    else:
        firsts = [fitted(rng, names, n) for n in lengths]
    hit_at = lengths[0] // block * block
    restore = hit_at if not tag else hit_at - block
    cold, resend = [], []
    for i, (conv, want) in enumerate(zip(firsts, wants)):
        session = f"{p.name}{tag.replace('-', '.')}.{i}"
        cold.append(_request(p.name, session, 0, f"{p.name}/cold{tag}", conv, Claim(count(conv.prompt()))))
        again, probe = _ask(rng, conv.defs, conv.answered(), restore, block, want, 1, {conv.asked})
        resend.append(_request(p.name, session, 1, f"{p.name}/resend{tag}", again,
                               Claim(count(again.prompt()), hit_at=hit_at, probe=probe)))
    return [(f"{p.name}/cold{tag}", tuple(cold)), (f"{p.name}/resend{tag}", tuple(resend))]


def decode_cross(p: ShapeParams, block: int, rng: random.Random, drop: random.Random | None = None) -> list[Phase]:
    """Prompts ``short_by`` tokens short of two blocks whose answers' decode crosses the
    boundary, then each with its answer and a question about the block before it; with
    ``drop``, each also with a question about the first block (a speculative engine's hit
    restores ``block``: the decode-published state at ``2 * block`` it never restores)."""
    lo, hi = p.short_by  # type: ignore[attr-defined]
    n: int = p.prompts  # type: ignore[attr-defined]
    names = Names(rng)
    boundary = 2 * block
    cross, resend, convs = [], [], []
    for i in range(n):
        short = lo + i % (hi - lo + 1)
        # The answer must run past the boundary before its end token: "var_XXXX =" is 7
        # tokens, then the words.
        conv = fitted(rng, names, boundary - short, asked_words=MAX_WORDS, asked_at=0.3)
        session = f"{p.name}.{i}"
        cross.append(_request(p.name, session, 0, f"{p.name}/cross", conv,
                              Claim(count(conv.prompt()), crosses=boundary)))
        again, probe = _ask(rng, conv.defs, conv.answered(), boundary, block, "before", 1, {conv.asked})
        resend.append(_request(p.name, session, 1, f"{p.name}/resend", again,
                               Claim(count(again.prompt()), hit_at=boundary, probe=probe)))
        convs.append((session, conv, again))
    if drop is not None:
        wants = _inside_cycle()
        for session, conv, again in convs:
            twin = _twin(drop, p.name, session, 1, f"{p.name}/resend", conv.defs, conv.answered(), boundary,
                         block, next(wants), {conv.asked, again.asked})
            if twin is not None:
                resend.append(twin[0])
    return [(f"{p.name}/cross", tuple(cross)), (f"{p.name}/resend", tuple(resend))]


def spec_tail(p: ShapeParams, block: int, rng: random.Random, drop: random.Random | None = None) -> list[Phase]:
    """Prompts of ``m * block + t`` tokens, sent cold and then again: the second hits
    ``m * block`` and prefills its last ``t`` tokens in one chunk. With ``drop``, for each
    ``m`` of 2 or more, prompts of the same length asking a line inside block ``m - 1``:
    what a speculative engine's hit (a block lower) restores."""
    names = Names(rng)
    cold, resend = [], []
    for m in p.blocks:  # type: ignore[attr-defined]
        for t in p.tails:  # type: ignore[attr-defined]
            restore = m * block
            conv = fitted(rng, names, restore + t, asked_at=0.95)
            session = f"{p.name}.{m}b{t}"
            cold.append(_request(p.name, session, 0, f"{p.name}/cold", conv, Claim(restore + t)))
            probe = where(line_spans(conv.defs)[conv.asked], restore, block)
            resend.append(_request(p.name, session, 1, f"{p.name}/resend", conv,
                                   Claim(restore + t, hit_at=restore, probe=probe)))
    if drop is not None:
        head = count(HEAD)
        for m in (m for m in p.blocks if m >= 2):  # type: ignore[attr-defined]
            for t in p.tails:  # type: ignore[attr-defined]
                restore = m * block
                # Near the end of the block the dropped hit restores: its words are carried
                # by that state alone.
                at = (restore - block - block // 4 - head) / max(1, restore + t - head)
                conv = fitted(drop, names, restore + t, asked_at=min(0.95, max(0.0, at)))
                session = f"{p.name}.{m}b{t}.drop"
                cold.append(_request(p.name, session, 0, f"{p.name}/cold", conv, Claim(restore + t)))
                probe = where(line_spans(conv.defs)[conv.asked], restore - block, block)
                resend.append(_request(p.name, session, 1, f"{p.name}/resend", conv,
                                       Claim(restore + t, hit_at=restore, probe=probe)))
    return [(f"{p.name}/cold", tuple(cold)), (f"{p.name}/resend", tuple(resend))]


def agent(p: ShapeParams, block: int, rng: random.Random, drop: random.Random | None = None) -> list[Phase]:
    """Sessions over one shared prefix, each turn resending its history, then agent switches
    (new sessions on the warm prefix). A request whose prompt an earlier phase left in the
    cache asks a line before, at or after the restore point its hit should reach; with
    ``drop``, a twin of it asks a line inside the block a speculative engine's hit, a
    block lower, restores."""
    names = Names(rng)
    shared = definitions(rng, names, max(LINE_TOKENS + MIN_WORDS, p.prefix_tokens - count(HEAD)))  # type: ignore[attr-defined]
    sessions: int = p.sessions  # type: ignore[attr-defined]
    # Each session ends in lines of its own, so sessions ask different lines past the prefix.
    defs = [(*shared, *definitions(rng, names, 4 * (LINE_TOKENS + 4)))
            for _ in range(sessions + p.agent_switches)]  # type: ignore[attr-defined]
    convs: dict[int, Conversation] = {}
    cached: list[list[str]] = []  # what earlier phases left in the cache: prompts and answers
    wants = _probe_cycle(1_000_000)
    inside = _inside_cycle()
    phases: list[Phase] = []

    def phase(name: str, turn: int, members: Sequence[int]) -> None:
        reqs, twins = [], []
        for s in members:
            prev = convs.get(s)
            history = prev.answered() if prev else ()
            asked = _asked_before(prev) if prev else set()
            restore = restore_point(Conversation(defs[s], history, f"turn {turn}", 0).prompt(), cached, block)
            conv, probe = _ask(rng, defs[s], history, restore, block, next(wants), turn, asked)
            convs[s] = conv
            claim = Claim(count(conv.prompt()), hit_at=restore, probe=probe) if restore else Claim(count(conv.prompt()))
            reqs.append(_request(p.name, f"{p.name}.{s}", turn, name, conv, claim))
            if drop is not None and restore and (twin := _twin(drop, p.name, f"{p.name}.{s}", turn, name, defs[s], history,
                                                               restore, block, next(inside), asked | {conv.asked})):
                twins.append(twin)
        phases.append((name, tuple(reqs + [r for r, _ in twins])))
        # The engine cached each prompt and what its decode wrote: the answer, then its end token.
        done = [convs[s] for s in members] + [c for _, c in twins]
        cached.extend(canary_tokens(c.prompt() + c.answer() + "<|im_end|>") for c in done)

    for t in range(p.turns):  # type: ignore[attr-defined]
        phase(f"{p.name}/turn-{t}", t, range(sessions))
    for k in range(p.agent_switches):  # type: ignore[attr-defined]
        phase(f"{p.name}/switch-{k}", 0, [sessions + k])
    return phases


def unique_tail(p: ShapeParams, block: int, rng: random.Random, drop: random.Random | None = None) -> list[Phase]:
    """A shared prefix ending mid-block, each request then a tail of its own longer than a
    block, in two waves: the second can only hit the shared prefix's last full block. With
    ``drop``, the second wave has as many more requests asking lines inside the block
    before it (a speculative engine's hit, a block lower)."""
    names = Names(rng)
    shared = definitions(rng, names, max(LINE_TOKENS + MIN_WORDS, round(p.shared_blocks * block) - count(HEAD)))  # type: ignore[attr-defined]
    restore = line_spans(shared)[-1][1] // block * block
    wants = _probe_cycle(1_000_000)
    phases: list[Phase] = []
    for wave in range(2):
        reqs = []
        for i in range(p.requests):  # type: ignore[attr-defined]
            defs = (*shared, *definitions(rng, names, round(p.tail_blocks * block)))  # type: ignore[attr-defined]
            if wave == 0:
                asked = rng.randrange(len(defs))
                conv = Conversation(defs, (), question(rng, defs, asked, 0), asked)
                claim = Claim(count(conv.prompt()))
            else:
                conv, probe = _ask(rng, defs, (), restore, block, next(wants), 0, set())
                claim = Claim(count(conv.prompt()), hit_at=restore, probe=probe) if restore else Claim(
                    count(conv.prompt()))
            reqs.append(_request(p.name, f"{p.name}.{wave}.{i}", 0, f"{p.name}/wave-{wave}", conv, claim))
        phases.append((f"{p.name}/wave-{wave}", tuple(reqs)))
    if drop is not None:
        inside = _inside_cycle()
        twins = []
        for i in range(p.requests):  # type: ignore[attr-defined]
            defs = (*shared, *definitions(drop, names, round(p.tail_blocks * block)))  # type: ignore[attr-defined]
            if twin := _twin(drop, p.name, f"{p.name}.1.{i}", 0, f"{p.name}/wave-1", defs, (), restore, block,
                             next(inside), set()):
                twins.append(twin[0])
        name, reqs = phases[-1]
        phases[-1] = (name, reqs + tuple(twins))
    return phases


def _common(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _as_repeat(phases: list[Phase], r: int) -> list[Phase]:
    """A shape's phases as its repeat ``r`` (from 1): their names, sessions and keys tagged."""
    tag = f"#{r + 1}"
    return [(name + tag, tuple(replace(q, key=f"{q.session}{tag}/{q.turn}", session=q.session + tag,
                                       phase=q.phase + tag, repeat=r) for q in reqs)) for name, reqs in phases]


BUILDERS: dict[str, Builder] = {
    "cold_race": cold_race, "decode_cross": decode_cross, "spec_tail": spec_tail, "agent": agent,
    "unique_tail": unique_tail,
}


def build_shapes(shapes: Sequence[ShapeParams], block: int, seed: int, version: int = LAYOUT_VERSION) -> list[Phase]:
    """Every shape's phases, in order, laid out on ``block`` by the builders' ``version``
    (:data:`LAYOUT_VERSION`); each shape draws from its own random stream, so adding a
    shape leaves the others' requests as they were. From version 2 a shape's block-drop
    requests draw from a stream of their own (the others are the first version's), and
    each repeat from its own."""
    phases: list[Phase] = []
    for n, shape in enumerate(shapes):
        stream = f"{seed}/{n}/{shape.kind}"
        if version < 2:
            phases += BUILDERS[shape.kind](shape, block, random.Random(stream), None)
            continue
        for r in range(getattr(shape, "repeat", 1)):
            key = stream if r == 0 else f"{stream}/repeat-{r}"
            drop = random.Random(f"{key}/block-drop") if getattr(shape, "block_drop", True) else None
            built = BUILDERS[shape.kind](shape, block, random.Random(key), drop)
            phases += built if r == 0 else _as_repeat(built, r)
    return phases
