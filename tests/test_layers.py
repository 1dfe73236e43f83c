"""The packages import one way (docs/ARCHITECTURE.md): vmatrix -> images -> jobs -> db -> orchestrator.

Read from the source with ``ast``, so a lazy import inside a function or a
``TYPE_CHECKING`` block counts as much as one at the top: each is a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("vmatrix", "images", "jobs", "db", "orchestrator")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found & set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(package) + 1])
    wrong = {
        str(path.relative_to(ROOT)): sorted(_imports(path) - allowed)
        for path in sorted((ROOT / package).rglob("*.py"))
        if _imports(path) - allowed
    }
    assert not wrong, f"{package} imports from above it: {wrong}"


def test_the_vocabulary_imports_nothing_of_the_project_but_itself() -> None:
    for path in (ROOT / "vmatrix").rglob("*.py"):
        assert _imports(path) <= {"vmatrix"}, path
