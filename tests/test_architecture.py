"""docs/ARCHITECTURE.md is held to the code: every module is named in its folder's row,
every file, folder and function the page names exists, and its size list is the code's.

The page is a newcomer's map; a map that has drifted (a module it does not mention, a
size that is no longer true, a function renamed) sends them the wrong way.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "ARCHITECTURE.md"
LAYERS = ("vmatrix", "images", "jobs", "db", "orchestrator")
# Not modules of a layer: patch sets (files laid on vLLM, and the scripts that make them),
# the shipped canaries' files, Alembic's revisions (their folder is named instead).
NOT_MODULES = ("images/patches/", "images/canary/shipped/", "db/migrations/versions/")
LIMIT = 500  # lines; only the canary builder is over it (the page says why)
LISTED = 400  # the page lists every module over this many lines, with its size
OVER_LIMIT = {"images/canary/build_canary.py"}


def _text() -> str:
    return PAGE.read_text()


def _rows() -> dict[str, str]:
    """The folders table: folder (as `db/`) -> the text of its row."""
    rows = {}
    for line in _text().splitlines():
        if m := re.match(r"\| `([\w/]+/)` \|(.*)\|\s*$", line):
            rows[m[1]] = m[2]
    return rows


def _modules() -> list[Path]:
    found = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "__pycache__" in rel or rel.startswith(NOT_MODULES):
                continue
            found.append(path)
    return found


def _folders() -> set[str]:
    return {p.parent.relative_to(ROOT).as_posix() + "/" for p in _modules()}


def test_every_folder_has_a_row_and_every_row_a_folder() -> None:
    rows = _rows()
    assert set(rows) == _folders(), (
        f"folders without a row: {sorted(_folders() - set(rows))}; rows without a folder: {sorted(set(rows) - _folders())}")


def test_every_module_is_named_in_its_folders_row() -> None:
    rows = _rows()
    missing = [p.relative_to(ROOT).as_posix() for p in _modules()
               if p.name != "__init__.py" and f"`{p.name}`" not in rows.get(p.parent.relative_to(ROOT).as_posix() + "/", "")]
    assert not missing, f"modules docs/ARCHITECTURE.md does not name in their folder's row: {missing}"


def test_every_module_and_folder_a_row_names_is_in_that_folder() -> None:
    wrong = [f"{folder}{name}" for folder, row in _rows().items()
             for name in re.findall(r"`(\w+\.py|\w+/)`", row) if not (ROOT / folder / name).exists()]
    assert not wrong, f"docs/ARCHITECTURE.md names modules or folders that are not there: {wrong}"


def test_every_subfolder_is_named_in_its_parents_row() -> None:
    rows = _rows()
    missing = [f for f in rows if f.count("/") > 1 and f"`{f.rstrip('/').rsplit('/', 1)[1]}/`" not in
               rows.get(f.rstrip("/").rsplit("/", 1)[0] + "/", "")]
    assert not missing, f"subfolders their parent's row does not name: {missing}"


def test_every_path_the_page_names_exists() -> None:
    # Paths from the repository's root (a row's own `plan/` or `matrix.py` is checked above).
    top = {p.name for p in ROOT.iterdir()}
    paths = {p for p in re.findall(r"`([\w.-]+/[\w./*-]*)`", _text()) if p.split("/")[0] in top and "*" not in p}
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def _resolve(name: str) -> object:
    """``vmatrix.a.b.C.d``: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_every_name_the_page_qualifies_exists() -> None:
    # The data flow names functions by their whole import path: each one must resolve.
    names = sorted(set(re.findall(r"`(vmatrix(?:\.\w+)+)(?:\([^`]*\))?`", _text())))
    assert len(names) >= 20, names
    missing = []
    for name in names:
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    assert not missing, f"docs/ARCHITECTURE.md names what the code does not have: {missing}"


def _size_list() -> dict[str, int]:
    section = _text().split("## Modules over", 1)[1]
    return {path: int(n) for path, n in re.findall(r"^- `([\w/.]+\.py)` \((\d+)\)", section, re.MULTILINE)}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_size_list_is_the_codes() -> None:
    listed = _size_list()
    actual = {p.relative_to(ROOT).as_posix(): _lines(p) for p in _modules()}
    over = {p for p, n in actual.items() if n > LISTED}
    assert set(listed) == over, f"over {LISTED} lines but not listed: {sorted(over - set(listed))}; " \
                                f"listed but not over: {sorted(set(listed) - over)}"
    off = {p: (n, actual[p]) for p, n in listed.items() if abs(actual[p] - n) > n // 10}
    assert not off, f"sizes the page gives that are off by more than a tenth (page, code): {off}"


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in _modules()))
def test_no_module_is_over_the_limit_but_the_canary_builder(path: str) -> None:
    assert _lines(ROOT / path) <= LIMIT or path in OVER_LIMIT, f"{path}: over {LIMIT} lines"
