"""Findings about a cell's speed, kept apart from its verdict, which is about its answers.

A drafter whose drafts are almost never accepted makes decoding slower, but greedy
verification keeps every answer the target model's own: the cell is right and slow.
So draft acceptance stuck near 0% is shown beside the verdict in every view (the
lookup table, ``results show``, the report, the published site) and never grades a
cell. Acceptance near 100% is different: verification is not rejecting anything, and
when answers go wrong that is a corruption symptom (``jobs/symptoms.py``,
``acceptance_high``), graded as before.

Read from the run's counter totals (``/metrics`` deltas summed over phases), the same
numbers the grader sees, so every view and the grade say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping

DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"

# Trained MTP / EAGLE heads on real models accept 40-90% of drafts; an untrained head
# measured 0.2-1.3% on the CPU engine (shared/ENGINES.md), the canary's DFlash drafter
# df1 1.4-1.5% on a long-context workload it was not trained for (docs/dflash2.md). At
# or below 2% a draft step costs more than it saves.
ACCEPTANCE_LOW = 0.02
# Fewer drafted tokens than this is too little to call a rate stuck.
ACCEPTANCE_MIN_DRAFTS = 100


def draft_counts(counters: Mapping[str, float]) -> tuple[float, float] | None:
    """(accepted, drafted) tokens from counter totals, or None if nothing was drafted."""
    drafted = counters.get(DRAFT_TOKENS) or 0.0
    if not drafted:
        return None
    return counters.get(ACCEPTED_TOKENS) or 0.0, drafted


def acceptance_detail(accepted: float, drafted: float) -> str:
    return f"acceptance {accepted / drafted:.1%} ({accepted:.0f} of {drafted:.0f} drafted tokens)"


def low_acceptance(counters: Mapping[str, float]) -> str | None:
    """The speed finding for these counter totals: a line saying drafts are barely
    accepted, or None (no drafts, too few to tell, or a working drafter)."""
    counts = draft_counts(counters)
    if counts is None or counts[1] < ACCEPTANCE_MIN_DRAFTS or counts[0] / counts[1] > ACCEPTANCE_LOW:
        return None
    return "slow drafts: " + acceptance_detail(*counts)
