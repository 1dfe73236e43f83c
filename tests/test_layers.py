"""The packages import one way (docs/ARCHITECTURE.md): vmatrix -> images -> jobs -> db -> orchestrator.

Each layer is a folder at the repository's top and a subpackage of the one import name,
``vmatrix`` (``vmatrix.db`` is db/): an import names a layer by its second part, and the
vocabulary (vmatrix/ itself) by any other.

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


def _layer(name: str) -> str | None:
    """The layer a dotted module name belongs to, or None outside the project."""
    head, _, rest = name.partition(".")
    if head != "vmatrix":
        return None
    return rest.split(".")[0] if rest.split(".")[0] in LAYERS[1:] else "vmatrix"


def _imports(path: Path) -> set[str]:
    return {layer for name in _modules(path) if (layer := _layer(name))}


def _sources() -> list[Path]:
    return [path for folder in (*LAYERS, "tests", "benchmarks") for path in sorted((ROOT / folder).rglob("*.py"))
            if "patches" not in path.relative_to(ROOT).parts and "canary" not in path.relative_to(ROOT).parts]


def test_the_layers_are_imported_by_their_one_name() -> None:
    # `import db` would find nothing once installed (setup.py puts db/ at vmatrix.db): a
    # bare layer name that works is a checkout on sys.path, and a second copy of a module.
    bare = {
        str(path.relative_to(ROOT)): sorted(m for m in _modules(path) if m.split(".")[0] in LAYERS[1:])
        for path in _sources()
    }
    assert not {k: v for k, v in bare.items() if v}, f"bare layer imports: {bare}"


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
        str(path.relative_to(ROOT)): sorted(m for m in _modules(path) if m.split(".")[:3] == ["vmatrix", "orchestrator", "cli"])
        for path in sorted((ROOT / "orchestrator").rglob("*.py"))
        if cli not in path.parents
    }
    assert not {k: v for k, v in wrong.items() if v}, f"the library imports the CLI: {wrong}"
