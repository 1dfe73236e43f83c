"""Grading and coverage per shape (jobs/shapes.py): what each shape found, and whether what
it is about happened.

Recall per shape follows vLLM's own hybrid prefix-cache test
(tests/v1/e2e/test_hybrid_mamba_prefix_cache_correctness.py): greedy recall against the
control, a shape fails on one-sided flips (right in the control, wrong in the cell) beyond
the flips the other way plus a margin, or on more distinct answers to one prompt than the
control gives plus one. Its counts are broken down by where the asked line lies relative
to the restore point (before / at / after).

Coverage per shape reads what the engine reported: each request's prefix-cache hit (its
usage's ``cached_tokens``) against the restore point it was laid out for, the prompt's
length against the one claimed, how far its decode went, and the draft tokens of the
shape's phases. A shape whose point did not happen is a gap, named.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmatrix.jobs.shape_text import where
from vmatrix.records import RequestRecord, Transcript
from vmatrix.workload import Claim

# vLLM's test: "one-sided flips <= reverse flips + 2" and "distinct outputs <= control + 1".
FLIP_MARGIN = 2
DISTINCT_MARGIN = 1
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"


@dataclass(frozen=True)
class Placed:
    """One shaped request as the workload laid it out: its shape, the phase it went in,
    its claim and its prompt (requests with the same prompt should answer alike)."""

    shape: str
    kind: str  # jobs.shapes.ShapeKind
    phase: str
    claim: Claim | None
    prompt: str
    repeat: int = 0  # which repeat of its shape (jobs.shapes: ``repeat``)


@dataclass(frozen=True)
class Shaped:
    """A shaped cell's requests as laid out, and what its knobs make of its shapes."""

    placed: Mapping[str, Placed]  # by request key
    block: int  # what the requests were laid out on
    draft_tokens: int | None = None  # num_speculative_tokens; None: no speculative decoding
    # Per cold_race shape: can the cell's budget split its concurrent prompts (jobs.shapes.fragments)?
    fragments: Mapping[str, bool | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ShapeFinding:
    shape: str
    reason: str  # flips | distinct
    summary: str
    keys: tuple[str, ...]


def shape_recall(cell: Transcript, control: Transcript, placed: Mapping[str, Placed],
                 block: int | None = None) -> dict[str, dict[str, Any]]:
    """Per shape: requests graded, right in the cell and in the control, one-sided flips
    (``flips``: control right, cell wrong; ``reverse``), per probe position, and distinct
    answers to repeated prompts in both runs.

    The position is the asked line's relative to the restore point the cell's hit reached
    as its engine reported it (``cached_tokens``; a speculative engine restores a block
    lower than laid out, by design), else relative to the one laid out."""
    mine = cell.by_key()
    out: dict[str, dict[str, Any]] = {}
    for ref in control.requests:
        at = placed.get(ref.key)
        got = mine.get(ref.key)
        if at is None or ref.expect is None or ref.error or got is None or got.error:
            continue
        s = out.setdefault(at.shape, {"requests": 0, "cell": 0, "control": 0, "flips": [], "reverse": 0,
                                      "by_probe": {}})
        ok_control, ok_cell = ref.expect.matches(ref.answer), ref.expect.matches(got.answer)
        s["requests"] += 1
        s["cell"] += ok_cell
        s["control"] += ok_control
        if ok_control and not ok_cell:
            s["flips"].append(ref.key)
        s["reverse"] += ok_cell and not ok_control
        probe = _place(at.claim, got.cached_tokens, block)
        p = s["by_probe"].setdefault(probe, {"requests": 0, "cell": 0, "control": 0})
        p["requests"] += 1
        p["cell"] += ok_cell
        p["control"] += ok_control
    for shape, (cell_n, control_n, keys) in _distinct(cell, control, placed).items():
        if shape in out:
            out[shape]["distinct"] = {"cell": cell_n, "control": control_n, "keys": keys}
    return out


def _place(claim: Claim | None, cached: int | None, block: int | None) -> str:
    if claim is None:
        return "no restore"
    if cached is not None and claim.asked is not None and block:
        return (where(claim.asked, cached, block) or "earlier") if cached > 0 else "no restore"
    return claim.probe or "no restore"


def _distinct(cell: Transcript, control: Transcript, placed: Mapping[str, Placed]
              ) -> dict[str, tuple[int, int, list[str]]]:
    """Per shape, over its groups of requests with the same prompt: the largest number of
    distinct answers in the cell, the control's for that group, and the group's keys."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, at in placed.items():
        groups[(at.shape, at.prompt)].append(key)
    mine, theirs = cell.by_key(), control.by_key()
    worst: dict[str, tuple[int, int, list[str]]] = {}
    for (shape, _), keys in groups.items():
        if len(keys) < 2:
            continue
        answers = [(mine.get(k), theirs.get(k)) for k in keys]
        n_cell = len({_answer(a) for a, _ in answers if a is not None and not a.error})
        n_control = len({_answer(b) for _, b in answers if b is not None and not b.error})
        if shape not in worst or n_cell - n_control > worst[shape][0] - worst[shape][1]:
            worst[shape] = (n_cell, n_control, sorted(keys))
    return worst


def _answer(r: RequestRecord) -> str:
    return r.answer if r.answer is not None else r.text


def shape_findings(recall: Mapping[str, Mapping[str, Any]]) -> list[ShapeFinding]:
    """The shapes that fail vLLM's rules, worst first."""
    found = []
    for shape, s in recall.items():
        flips = s["flips"]
        if len(flips) > s["reverse"] + FLIP_MARGIN:
            where = ", ".join(f"{p} {v['cell']}/{v['requests']} (control {v['control']})"
                              for p, v in sorted(s["by_probe"].items()))
            found.append(ShapeFinding(shape, "flips", (
                f"shape {shape}: recall {s['cell']}/{s['requests']} against the control's {s['control']}: "
                f"{len(flips)} answers right in the control are wrong in the cell, {s['reverse']} the other way "
                f"(allowed: {s['reverse']} + {FLIP_MARGIN}); by the asked line's place: {where}"), tuple(flips)))
        distinct = s.get("distinct")
        if distinct and distinct["cell"] > distinct["control"] + DISTINCT_MARGIN:
            found.append(ShapeFinding(shape, "distinct", (
                f"shape {shape}: {distinct['cell']} distinct answers to one prompt sent {len(distinct['keys'])} "
                f"times (control {distinct['control']}, allowed + {DISTINCT_MARGIN})"), tuple(distinct["keys"])))
    return sorted(found, key=lambda f: -len(f.keys))


def shape_coverage(cell: Transcript, placed: Mapping[str, Placed], *, prefix_caching: bool, block: int,
                   draft_tokens: int | None, fragments: Mapping[str, bool | None]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(per shape: what happened, gaps, unmeasured) from what the engine reported.

    ``draft_tokens``: the cell's tokens drafted per step (None: no speculative decoding);
    ``fragments``: per cold_race shape, whether the cell's token budget and max_num_seqs
    can split its concurrent prompts (None: not known, see jobs.shapes.fragments).
    """
    by_shape: dict[str, list[tuple[RequestRecord, Placed]]] = defaultdict(list)
    for r in cell.requests:
        if (at := placed.get(r.key)) is not None:
            by_shape[at.shape].append((r, at))
    report: dict[str, Any] = {}
    gaps: list[str] = []
    unmeasured: list[str] = []
    kinds = {at.shape: at.kind for at in placed.values()}
    for shape in dict.fromkeys(at.shape for at in placed.values()):
        rows = [(r, at) for r, at in by_shape.get(shape, []) if not r.error]
        phases = {at.phase for at in placed.values() if at.shape == shape}
        s: dict[str, Any] = {"requests": len(rows)}
        wrong_length = [r.key for r, at in rows if at.claim and r.prompt_tokens and r.prompt_tokens != at.claim.prompt_tokens]
        if wrong_length:
            r0, at0 = next((r, at) for r, at in rows if r.key == wrong_length[0])
            gaps.append(f"{shape}: {len(wrong_length)}/{len(rows)} prompts are not the length they were laid out for "
                        f"(first {r0.key}: {r0.prompt_tokens} tokens, laid out {at0.claim.prompt_tokens if at0.claim else '?'})")
        hits = [(r, at.claim) for r, at in rows if at.claim and at.claim.hit_at]
        if prefix_caching and hits:
            reported = [(r, c) for r, c in hits if r.cached_tokens is not None]
            # With EAGLE/MTP vLLM restores one block lower than the prompt allows, by design
            # (full attention drops the last matching block, the scheduler backs off one:
            # `use_eagle_block_drop`): that hit is the restore the shape is about.
            dropped = [r.key for r, c in reported if draft_tokens is not None and c.hit_at > block
                       and r.cached_tokens == c.hit_at - block]  # type: ignore[operator]
            reached = [r.key for r, c in reported if r.cached_tokens >= c.hit_at] + dropped  # type: ignore[operator]
            short = [r.key for r, c in reported if 0 < r.cached_tokens < c.hit_at and r.key not in dropped]  # type: ignore[operator]
            s["hits"] = {"laid_out": len(hits), "reported": len(reported), "reached": len(reached), "short": len(short),
                         "none": len(reported) - len(reached) - len(short), "block_drop": len(dropped)}
            if not reported:
                unmeasured.append(f"{shape}: the engine reported no per-request prefix-cache hits")
            elif not reached:
                at = sorted({c.hit_at for _, c in hits})
                got = sorted({r.cached_tokens for r, _ in reported})
                gaps.append(f"{shape}: no request hit the restore point it was laid out for ({len(reported)} asked for "
                            f"{_few(at)} tokens; hits were {_few(got)})")
        crossing = [(r, at.claim) for r, at in rows if at.claim and at.claim.crosses]
        if crossing:
            crossed = [r.key for r, c in crossing if r.prompt_tokens and r.prompt_tokens < c.crosses  # type: ignore[operator]
                       <= r.prompt_tokens + len(r.token_ids)]
            s["decode_crossed"] = len(crossed)
            if not crossed:
                gaps.append(f"{shape}: no request's decode crossed the block boundary it was laid out to cross")
        if draft_tokens is not None:
            drafted = sum(cell.metrics.get(p, {}).get(SPEC_DRAFT_TOKENS, 0.0) for p in phases)
            s["drafted"] = drafted
            if not cell.metrics:
                unmeasured.append(f"{shape}: /metrics not scraped (drafted tokens)")
            elif drafted == 0:
                gaps.append(f"{shape}: no token drafted in its phases")
            tails = [r.key for r, c in hits if c.prompt_tokens - c.hit_at == 1 + draft_tokens  # type: ignore[operator]
                     and r.cached_tokens is not None and r.cached_tokens == c.hit_at]
            if kinds[shape] == "spec_tail":
                s["tail_of_1_plus_k"] = len(tails)
                if prefix_caching and not tails:
                    gaps.append(f"{shape}: no resend's last prefill chunk was 1 + k = {1 + draft_tokens} tokens past a "
                                "restored boundary")
        if shape in fragments:
            s["fragments"] = fragments[shape]
            if fragments[shape] is False:
                gaps.append(f"{shape}: the token budget fits every concurrent prompt, so no prefill chunk ends mid-block")
            elif fragments[shape] is None:
                unmeasured.append(f"{shape}: the engine's token budget is its default (not known here), so whether "
                                  "chunks fragment is not known")
        # The lines asked are placed against the restore point laid out; a hit that came a
        # block lower (MTP's block drop) leaves them all after it: the state it restored
        # was then asked about only through lines computed from it, not lines it carries.
        inside = [r.key for r, at in rows if r.cached_tokens and _place(at.claim, r.cached_tokens, block) in ("before", "at")]
        if prefix_caching and hits and any(r.cached_tokens for r, _ in hits) and not inside:
            unmeasured.append(f"{shape}: no asked line lies inside the block its hit restored (the hits came "
                              "lower than laid out), so the restored state was not asked what it carries")
        report[shape] = s
    return report, gaps, unmeasured


def repeat_counts(placed: Mapping[str, Placed], wrong: set[str]) -> dict[str, list[dict[str, int]]]:
    """Per shape laid out more than once (``repeat``): each repeat's requests and how many of
    them answered wrong (``wrong``: keys that differ from the control at a clear margin,
    or are right in the control and wrong in the cell)."""
    per: dict[str, dict[int, list[int]]] = defaultdict(dict)
    for key, at in placed.items():
        counts = per[at.shape].setdefault(at.repeat, [0, 0])
        counts[0] += 1
        counts[1] += key in wrong
    return {shape: [{"repeat": r + 1, "requests": n, "wrong": w} for r, (n, w) in sorted(reps.items())]
            for shape, reps in per.items() if len(reps) > 1}


def repeats_line(counts: Mapping[str, Sequence[Mapping[str, int]]]) -> str:
    """One clause per repeated shape: "cold_race wrong in 3 of 5 repeats (1-2 answers each)"."""
    parts = []
    for shape, reps in counts.items():
        wrong = [r["wrong"] for r in reps if r["wrong"]]
        if wrong:
            each = f"{min(wrong)}-{max(wrong)}" if min(wrong) != max(wrong) else f"{wrong[0]}"
            parts.append(f"{shape} wrong in {len(wrong)} of {len(reps)} repeats ({each} answer(s) each)")
        else:
            parts.append(f"{shape} right in all {len(reps)} repeats")
    return "; ".join(parts)


def _few(values: Sequence[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:4])
    return shown + (f" ... ({len(values)} values)" if len(values) > 4 else "")
