"""Reading what ``vmatrix fixes`` stored (the ``fixes`` table): a row's result, wrong answers
and coverage per shape as the views print them (``results show``, the report, the site), so
the three say the same thing. The rows are ``orchestrator/fixes.py``'s ``FixRow`` as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def result_text(row: Mapping[str, Any]) -> str:
    """The row's verdict, its status when it is not ``ok`` (and no verdict says more)."""
    verdict, status = row.get("verdict"), row.get("status")
    if verdict and status not in (None, "ok") and verdict != status:
        return f"{verdict} ({status})"
    return verdict or status or "not run"


def wrong_text(row: Mapping[str, Any]) -> str:
    """``3 of 128``: answers that differ from the control's at a clear margin; ``-`` unmeasured."""
    return f"{row['wrong']} of {row['requests']}" if row.get("wrong") is not None else "-"


def shapes_text(row: Mapping[str, Any]) -> str:
    """Per shape: answers right of those graded (the control's right), and the hits that
    reached the restore point of those laid out: ``cold_race 93/96 (96), hits 27/48``; then,
    where the run drafted, the share of draft tokens accepted."""
    parts = []
    for name, s in (row.get("shapes") or {}).items():
        text = f"{name} {s.get('right', '-')}/{s.get('graded', '-')} ({s.get('control', '-')})"
        if s.get("hits_laid_out"):
            text += f", hits {s.get('hits_reached', 0)}/{s['hits_laid_out']}"
        parts.append(text)
    if row.get("acceptance") is not None:
        parts.append(f"drafts accepted {row['acceptance']:.1%}")
    return "; ".join(parts) or "-"


def run_text(row: Mapping[str, Any]) -> str:
    if row.get("run_id") is None:
        return "-"
    return f"{row['run_id']}" + (" (reused)" if row.get("reused") else "")
