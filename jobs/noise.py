"""What grading must not call a change: a control run against its own repeat (the noise
floor, :func:`repeatability`), and the tie margin that follows from it and from bf16's
resolution at the model's logit scale (:func:`scaled_tie_margin`,
:func:`effective_tie_margin`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from vmatrix.jobs.divergence import compare
from vmatrix.records import Transcript

# Drift on tokens both runs agree on, beyond this multiple of the noise floor (its
# measured drift, or the tie margin at one bf16 step of the logit scale when the repeat
# was bit-exact or not measured), is more than rounding. Noise and changed arithmetic are one bf16 step (0.031 on the
# CPU engine, 0.034 on the H200s, docs/GPU.md); the positive control drifted 0.077-
# 0.079: 1.5 x max(0.031, 0.04) = 0.06 separates them. The envelope only decides between
# flips with drift (corrupt) and flips without (degraded): drift alone grades nothing.
# On an H200 healthy cells of vLLM 0.25.1 drifted 0.211 (prefix caching, the same token in
# three runs, a near-tie) and 0.267 (MTP, no cache) against a control bit-exact with
# itself, so no floor a control repeat measures covers a changed GPU path; and in no
# recorded run did drift alone catch a fault the answers missed (docs/GRADING.md).


@dataclass(frozen=True)
class NoiseFloor:
    """How much two runs of the same control differ: what grading must not call a change."""

    requests: int
    identical: int
    flips: int  # requests whose tokens differ at all
    max_drift: float
    max_flip_margin: float | None  # the control's largest margin at any of those differences

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def noise_floor(repeat: Transcript, control: Transcript, end_tokens: frozenset[int] = frozenset()) -> NoiseFloor:
    """Compare a control's repeat with the control itself (:func:`repeatability`), every
    difference counted: its largest control margin is the smallest tie margin under which
    the repeat grades without a confident divergence. ``end_tokens``: measured on the
    answers, as the cells are graded (:func:`compare`).
    """
    r = repeatability(repeat, control, end_tokens)
    if r.missing:
        raise ValueError("a control repeat with failed requests cannot measure a noise floor")
    return NoiseFloor(r.requests, r.identical, r.diverged, r.drift_max, r.max_margin_at_divergence)


BF16_SIGNIFICANT_BITS = 8  # 7 stored mantissa bits and the implicit leading one


def bf16_step(x: float) -> float:
    """The distance between adjacent bf16 values around ``x``: 2 ** (floor(log2 |x|) - 7).

    bf16 keeps 8 significant bits, so values in [2**e, 2**(e+1)) are 2**(e-7) apart:
    1/32 between 4 and 8, 1/16 between 8 and 16. 0 for 0 (and for inf or nan).
    """
    if x == 0 or not math.isfinite(x):
        return 0.0
    _, e = math.frexp(abs(x))  # |x| = m * 2**e with 0.5 <= m < 1, so floor(log2 |x|) = e - 1, exactly
    return math.ldexp(1.0, e - 1 - (BF16_SIGNIFICANT_BITS - 1))


def scaled_tie_margin(tie_margin: float, tie_steps: float, logit_scale: float | None) -> float:
    """The configured margin, raised to ``tie_steps`` bf16 steps at ``logit_scale`` (the
    model's largest top-1 logit magnitude) when that is known.

    Margins are differences of logits, and each logit is rounded to bf16 at its own
    magnitude: a confident model's top logits sit where one bf16 step is 1/16 or more,
    so a fixed 0.04 would call two tokens one rounding apart a clear choice.
    """
    if logit_scale is None:
        return tie_margin
    return max(tie_margin, tie_steps * bf16_step(logit_scale))


def effective_tie_margin(tie_margin: float, floor: NoiseFloor | None) -> float:
    """The margin the grader uses: ``tie_margin`` (already scaled), raised to the measured
    noise floor's largest flip margin."""
    if floor is None or floor.max_flip_margin is None:
        return tie_margin
    return max(tie_margin, floor.max_flip_margin)


@dataclass(frozen=True)
class Repeatability:
    """Two runs of the same stack compared: the noise floor of that stack on that host.

    Nothing differs between the runs but the run itself, so every divergence here is
    nondeterminism; the largest control margin at which one happened is the smallest
    ``tie_margin`` that would grade this stack clean against itself.
    """

    requests: int
    identical: int
    diverged: int
    missing: int
    drift_median: float
    drift_max: float
    max_margin_at_divergence: float | None  # None: no divergence (or no margin recorded there)
    first_index_median: float | None  # how deep into the continuation the runs part


def repeatability(later: Transcript, earlier: Transcript, end_tokens: frozenset[int] = frozenset()) -> Repeatability:
    grades = [compare(later.by_key().get(r.key), r, end_tokens=end_tokens) for r in earlier.requests]
    diverged = [g for g in grades if g.verdict != "identical" and g.verdict != "missing"]
    drifts = sorted(g.drift for g in grades if g.verdict != "missing")
    margins = [g.control_margin for g in diverged if g.control_margin is not None]
    firsts = sorted(g.index for g in diverged if g.index is not None)

    def median(xs: list[Any]) -> float:
        n = len(xs)
        return float(xs[n // 2]) if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

    return Repeatability(
        requests=len(grades),
        identical=sum(g.verdict == "identical" for g in grades),
        diverged=len(diverged),
        missing=sum(g.verdict == "missing" for g in grades),
        drift_median=median(drifts) if drifts else 0.0,
        drift_max=drifts[-1] if drifts else 0.0,
        max_margin_at_divergence=max(margins) if margins else None,
        first_index_median=median(firsts) if firsts else None,
    )
