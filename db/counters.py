"""What a run's ``/metrics`` counters say, as every view prints it: the prefix cache's hit
rate, draft acceptance, and acceptance per draft position (``results compare``,
``results show``, the report, export)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from vmatrix.db.reads import PREFIX_HITS, PREFIX_QUERIES

SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"


SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"


SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total{position="


@dataclass(frozen=True)
class Rates:
    """Ratios of counters; None where the engine never counted (e.g. caching off)."""

    prefix_hit_rate: float | None = None
    spec_acceptance: float | None = None
    acceptance_per_position: tuple[float, ...] = ()


@functools.lru_cache(maxsize=4096)  # a handful of distinct names, looked up for every run
def _position(name: str) -> int | None:
    if not (name.startswith(SPEC_ACCEPTED_PER_POS) and name.endswith("}")):
        return None
    digits = name[len(SPEC_ACCEPTED_PER_POS) : -1]
    return int(digits) if digits.isdigit() else None


def rates(totals: Mapping[str, float]) -> Rates:
    """Prefix hit rate, draft acceptance, and acceptance per draft position.

    Per position the denominator is the number of drafts: each draft proposes one token
    at every position, so position N's rate is how often the Nth draft token survived.
    Engines that do not export the draft count get it as draft tokens / positions.
    """
    queries = totals.get(PREFIX_QUERIES, 0.0)
    hit = totals.get(PREFIX_HITS, 0.0) / queries if queries > 0 else None
    draft_tokens = totals.get(SPEC_DRAFT_TOKENS, 0.0)
    accepted = totals.get(SPEC_ACCEPTED, 0.0) / draft_tokens if draft_tokens > 0 else None
    per_pos = {p: v for name, v in totals.items() if (p := _position(name)) is not None}
    drafts = totals.get(SPEC_DRAFTS) or (draft_tokens / len(per_pos) if per_pos else 0.0)
    positions = tuple(per_pos[p] / drafts for p in sorted(per_pos)) if drafts > 0 else ()
    return Rates(hit, accepted, positions)
