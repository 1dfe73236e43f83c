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


def _modules(path: Path) -> set[str]:
    """Every module ``path`` imports, dotted, lazy imports included."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _imports(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules(path)} & set(LAYERS)


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


def test_the_cli_sits_on_top_of_the_orchestrator() -> None:
    # orchestrator/cli/ is the command line apart from the library (as guidellm keeps
    # cli/): the library under it never reaches up into a command or a view.
    cli = ROOT / "orchestrator" / "cli"
    wrong = {
        str(path.relative_to(ROOT)): sorted(m for m in _modules(path) if m.split(".")[:2] == ["orchestrator", "cli"])
        for path in sorted((ROOT / "orchestrator").rglob("*.py"))
        if cli not in path.parents
    }
    assert not {k: v for k, v in wrong.items() if v}, f"the library imports the CLI: {wrong}"
