"""One request of a cell against the same request of its control: the first token where
they part, the control's logprob margin there, and what that makes the request
(``identical``, ``tie-flip``, ``divergent``, ``missing``). jobs/grade.py grades a cell
from these; jobs/noise.py measures a control against itself with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vmatrix.records import RequestRecord, answer_span

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


CONTINUATION_TOKENS = 8  # token ids kept on each side of a divergence, for evidence


@dataclass(frozen=True)
class Divergence:
    index: int  # first token where the two outputs differ
    margin: float | None  # the control's top-1 minus top-2 logprob there
    confident: bool  # differs where the control was not near a tie


def first_divergence(
    cell: Sequence[int], control: Sequence[int], margins: Sequence[float | None], tie_margin: float
) -> Divergence | None:
    """Where two greedy outputs first differ and whether that is beyond a tie; None if equal.

    Shared by the grader and the replay's early abort, so both count the same thing.
    """
    index = next((i for i, (x, y) in enumerate(zip(cell, control)) if x != y), None)
    if index is None and len(cell) != len(control):
        index = min(len(cell), len(control))
    if index is None:
        return None
    margin = margins[index] if index < len(margins) else None
    # A cell that stopped short is not a tie: it had no token to flip.
    tie = margin is not None and margin <= tie_margin and index < len(cell)
    return Divergence(index, margin, not tie)


@dataclass(frozen=True)
class RequestGrade:
    key: str
    verdict: str  # identical | tie-flip | divergent | missing | skipped
    session: str = ""
    turn: int | None = None
    index: int | None = None  # first divergent token
    control_margin: float | None = None
    # Largest |logprob difference| of the same token before the first divergence: how
    # far the two runs' numerics drifted even where they agree (the noise floor).
    drift: float = 0.0
    drift_index: int | None = None
    # Largest |difference| of the top-1/top-2 margin there: a confident model's chosen
    # logprobs sit at ~0 whatever its state, its margins do not (evidence only: docs/GRADING.md).
    margin_drift: float = 0.0
    margin_drift_index: int | None = None
    cell_tokens: tuple[int, ...] = ()
    control_tokens: tuple[int, ...] = ()
    cell_text: str = ""
    control_text: str = ""
    # Tokens compared: the control's answer (up to its end-of-turn token); None: all.
    graded_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"cell_tokens": list(self.cell_tokens), "control_tokens": list(self.control_tokens)}


def compare(cell: RequestRecord | None, control: RequestRecord, tie_margin: float = 0.0,
            end_tokens: frozenset[int] = frozenset()) -> RequestGrade:
    """One request of a cell against its control's, on the control's answer when
    ``end_tokens`` say where it ends (:func:`vmatrix.records.answer_span`), else on all tokens."""
    where = {"session": control.session, "turn": control.turn}
    if cell is None or cell.error:
        return RequestGrade(control.key, "missing", **where, cell_text=(cell.error or "") if cell else "not sent",
                            control_text=control.text)
    span = answer_span(control.token_ids, end_tokens)
    where |= {"graded_tokens": span}
    a, b = cell.token_ids[:span], control.token_ids[:span]
    div = first_divergence(a, b, control.margins[:span], tie_margin)
    same = len(a) if div is None else div.index
    diffs = [abs(x - y) for x, y in zip(cell.logprobs[:same], control.logprobs[:same])]
    drift = max(diffs, default=0.0)
    drift_index = diffs.index(drift) if diffs and drift > 0 else None
    gaps = [abs(x - y) if x is not None and y is not None else 0.0
            for x, y in zip(cell.margins[:same], control.margins[:same])]
    margin_drift = max(gaps, default=0.0)
    moved = {"drift": drift, "drift_index": drift_index, "margin_drift": margin_drift,
             "margin_drift_index": gaps.index(margin_drift) if gaps and margin_drift > 0 else None}
    if div is None:
        return RequestGrade(control.key, "identical", **where, **moved)
    i = div.index
    return RequestGrade(
        control.key, "divergent" if div.confident else "tie-flip", **where, index=i, control_margin=div.margin,
        **moved, cell_tokens=tuple(a[i:i + CONTINUATION_TOKENS]),
        control_tokens=tuple(b[i:i + CONTINUATION_TOKENS]), cell_text=cell.text, control_text=control.text,
    )
