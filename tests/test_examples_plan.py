"""Every matrix the repository ships (examples/, benchmarks/) plans: a user who copies one
gets cells, not a SpecError. The real loader and planner; the package index is not asked
(check_index=False), so releases are taken as written. Compose files are not matrices."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.matrix import expand
from orchestrator.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
MATRICES = sorted(p for d in ("examples", "benchmarks") for p in (ROOT / d).glob("*.yaml")
                  if not p.name.startswith("compose"))


def test_the_repository_ships_matrices() -> None:
    assert len(MATRICES) >= 20


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_matrix_plans(path: Path) -> None:
    plan = expand(load_spec(path, check_index=False), str(path))
    assert plan.cells and plan.controls
