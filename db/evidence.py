"""Reading a grade's evidence for a person: the expected answer at the first divergence.

Shared by `vmatrix results show` (orchestrator/cli/show_view.py) and the published site
(db/site.py), which show the same divergence side by side: the cell's continuation, the
control's, and the ground truth where the workload has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vmatrix.db.reads import Readable


def expected_text(expected: Any) -> str | None:
    """An expectation (vmatrix/expect.py's JSON form) as a person reads it."""
    if expected is None:
        return None
    if isinstance(expected, str):
        return expected
    if isinstance(expected, Mapping) and len(expected) == 1:
        [(kind, value)] = expected.items()
        if kind == "exact":
            return str(value)
        if kind == "regex":
            return f"/{value}/"
        return f"{kind} {json.dumps(value, sort_keys=True)}"
    return json.dumps(expected, sort_keys=True)


def ground_truth(evidence: Mapping[str, Any], expect_by_key: Mapping[str, Any]) -> str | None:
    """The expected answer at the first divergence: the grade's own copy when it has one
    (a recall regression), else the request's recorded expectation."""
    first = evidence.get("first") or {}
    if "expected" in first:
        return expected_text(first["expected"])
    key = first.get("key")
    for r in (evidence.get("recall") or {}).get("regressions", ()):
        if r.get("key") == key:
            return expected_text(r.get("expected"))
    return expected_text(expect_by_key.get(key)) if key else None


def expectations_for(source: Readable, run_id: int) -> dict[str, Any]:
    """The expected answer of each of a run's requests that has one, by request key."""
    with source.reader() as rc:
        rows = rc.rows("SELECT key, expect FROM requests WHERE run_id = ? AND expect IS NOT NULL", [run_id])
    return {key: json.loads(raw) if isinstance(raw, str) else raw for key, raw in rows}


def unmeasured_of(evidence: Mapping[str, Any] | None) -> list[str]:
    """What a grade says it could not measure: its coverage's ``unmeasured`` items (the
    reasons a `partial` is not `clean`)."""
    coverage = (evidence or {}).get("coverage") or {}
    return [str(item) for item in coverage.get("unmeasured") or ()]
