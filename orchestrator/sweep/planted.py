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
from pathlib import Path
from typing import Any

from vmatrix.images.recipe import planted_lines
from vmatrix.recipe import EngineRecipe


def planted_counts(recipe: EngineRecipe, log_path: str | None,
                   earlier: Iterable[dict[str, Any]] = ()) -> dict[str, int | None]:
    """{set: times its line is in the engine's log} for the recipe's planted sets; from an
    earlier grade's evidence (``earlier``, newest first) when the log is not at hand, and
    None where neither knows."""
    lines = planted_lines(recipe)
    if not lines:
        return {}
    try:
        log = Path(log_path).read_text(errors="replace") if log_path else None
    except OSError:
        log = None
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
    if silent and verdict in ("clean", "partial"):
        return "unexercised", f"not exercised: {'; '.join(silent)}"
    if unknown and verdict == "clean":
        return "partial", f"{summary}; not measured: {'; '.join(unknown)}"
    return verdict, summary
