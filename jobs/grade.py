"""Grade a cell's replay against its control's, request by request.

Generated token ids are compared exactly. At the first divergent token the
control's logprob margin (top-1 minus top-2) decides what the divergence means: at
a near-tie (margin <= ``tie_margin``) greedy decoding may flip with batch shape, so
the request is a ``tie-flip``, not evidence against the stack; at a clear margin the
cell's state produced a different distribution, and the request is ``divergent``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.records import RequestRecord, Transcript


@dataclass(frozen=True)
class RequestGrade:
    key: str
    verdict: str  # identical | tie-flip | divergent | missing
    index: int | None = None  # first divergent token
    control_margin: float | None = None
    # Largest |logprob difference| of the same token before the first divergence: how
    # far the two runs' numerics drifted even where they agree (the noise floor).
    drift: float = 0.0
    cell_tokens: tuple[int, ...] = ()
    control_tokens: tuple[int, ...] = ()
    cell_text: str = ""
    control_text: str = ""


def compare(cell: RequestRecord | None, control: RequestRecord, tie_margin: float = 0.0) -> RequestGrade:
    if cell is None or cell.error:
        return RequestGrade(control.key, "missing", cell_text=(cell.error or "") if cell else "not sent")
    a, b = cell.token_ids, control.token_ids
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if index is None and len(a) != len(b):
        index = min(len(a), len(b))
    same = len(a) if index is None else index
    drift = max((abs(x - y) for x, y in zip(cell.logprobs[:same], control.logprobs[:same])), default=0.0)
    if index is None:
        return RequestGrade(control.key, "identical", drift=drift)
    margin = control.margins[index] if index < len(control.margins) else None
    tie = margin is not None and margin <= tie_margin and index < len(a)
    return RequestGrade(
        control.key, "tie-flip" if tie else "divergent", index, margin, drift,
        tuple(a[index:index + 8]), tuple(b[index:index + 8]), cell.text, control.text,
    )


def _evidence(g: RequestGrade) -> dict[str, Any]:
    return g.__dict__ | {"cell_tokens": list(g.cell_tokens), "control_tokens": list(g.control_tokens)}


def grade_transcripts(
    cell: Transcript, control: Transcript, tie_margin: float = 0.0, max_tie_flip_fraction: float = 1.0
) -> tuple[str, str, dict[str, Any]]:
    """Return (verdict, one-line summary, evidence) for two completed replays."""
    mine = cell.by_key()
    grades = [compare(mine.get(r.key), r, tie_margin) for r in control.requests]
    ties = [g for g in grades if g.verdict == "tie-flip"]
    bad = [g for g in grades if g.verdict in ("divergent", "missing")]
    identical = len(grades) - len(ties) - len(bad)
    evidence: dict[str, Any] = {
        "requests": len(grades),
        "identical": identical,
        "max_drift": max((g.drift for g in grades), default=0.0),
        "tie_margin": tie_margin,
        "tie_flips": [_evidence(g) for g in ties],
        "divergent": [_evidence(g) for g in bad],
    }
    if not bad and len(ties) > max_tie_flip_fraction * len(grades):
        # Each flip alone is a near-tie, but noise does not flip this many requests.
        return "divergent", (f"{len(ties)}/{len(grades)} requests flip at near-ties (noise allows "
                             f"{max_tie_flip_fraction:.0%}); first at {ties[0].key} token {ties[0].index}"), evidence
    if not bad:
        flips = f", {len(ties)} tie flip(s) at margin <= {tie_margin}" if ties else ""
        return "clean", f"{identical}/{len(grades)} requests identical to control{flips}", evidence
    first = bad[0]
    where = f"{first.key} token {first.index}" if first.index is not None else f"{first.key} ({first.verdict})"
    margin = f", control margin {first.control_margin:.2f}" if first.control_margin is not None else ""
    return "divergent", f"{len(bad)}/{len(grades)} requests differ; first at {where}{margin}", evidence


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


def repeatability(later: Transcript, earlier: Transcript) -> Repeatability:
    grades = [compare(later.by_key().get(r.key), r) for r in earlier.requests]
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
