"""Did a planted positive control plant? A cell whose engine carries a set that corrupts
on purpose (images/patches/NAME/planted.txt: the line its patches log each time) proves
the grader can see a wrong restore only if the set fired. On 2026-12-05 one did not: the
CUDA zeroing set hooks mamba cache mode `align`, vLLM chose `all` for Nemotron-H, and its
prefix-caching cells graded `clean` with nothing planted. So the set's line is counted in
the engine's log and kept with the grade (a regrade elsewhere reads it there); a set that
never fired is a gap of the cell's coverage, and an unknown count an unmeasured item.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def planted_counts(lines: dict[str, str], log: str | None,
                   earlier: Iterable[dict[str, Any]] = ()) -> dict[str, int | None]:
    """{set: times its line (``lines``, images.recipe.planted_lines) is in the engine's log};
    from an earlier grade's evidence (``earlier``, newest first) when the log is not at hand,
    and None where neither knows."""
    if log is not None:
        return {name: log.count(line) for name, line in lines.items()}
    kept = next((e["planted"] for e in earlier if isinstance(e.get("planted"), dict)), {})
    return {name: kept.get(name) for name in lines}


def judge(verdict: str, summary: str, evidence: dict[str, Any], counts: dict[str, int | None],
          lines: dict[str, str]) -> tuple[str, str]:
    """The verdict with the planted sets' counts in the coverage: a `clean` (or `partial`)
    over a set that never fired is `unexercised`, over an unknown count `partial`; a
    `corrupt` stays (its differences are evidence whoever made them)."""
    evidence["planted"] = counts
    cov = evidence.setdefault("coverage", {"gaps": [], "unmeasured": []})
    silent = [f"planted set {name} never fired (no '{lines[name]}' in the engine's log)"
              for name, n in counts.items() if n == 0]
    unknown = [f"planted set {name}: the engine's log is not at hand" for name, n in counts.items() if n is None]
    cov.setdefault("gaps", []).extend(silent)
    cov.setdefault("unmeasured", []).extend(unknown)
    # `first` as the grader writes it for these verdicts (docs/GRADING.md).
    if silent and verdict in ("clean", "partial"):
        evidence["first"] = {"reason": "unexercised", "gap": silent[0]}
        return "unexercised", f"not exercised: {'; '.join(silent)}"
    if unknown and verdict == "clean":
        evidence["first"] = {"reason": "partial", "unmeasured": unknown[0]}
        return "partial", f"{summary}; not measured: {'; '.join(unknown)}"
    return verdict, summary
