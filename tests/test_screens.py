"""The 80-column screens in docs/screens/ are what the commands print now.

Each screen is a command run at 80 columns (Rich, COLUMNS=80, no terminal: plain text)
on a recorded store or an example matrix. The store is docs/runs/gpu-h200-verdicts-
2026-12-01.db, real vLLM 0.26.0 runs on an H200 (docs/GPU.md), copied first. A layout
change fails here until the screens are written again:

    VMATRIX_WRITE_SCREENS=1 python -m pytest -q tests/test_screens.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.orchestrator.cli import app

ROOT = Path(__file__).parent.parent
SCREENS = ROOT / "docs" / "screens"
RECORDED = unpacked("gpu-h200-verdicts-2026-12-01.db")

# name -> argv; "{db}" is the copy of the recorded store.
COMMANDS = {
    "results-show-corrupt.txt": ["results", "show", "c904a402", "--db", "{db}"],
    "results-show-mtp.txt": ["results", "show", "499e17a5", "--db", "{db}"],
    "results-ls.txt": ["results", "ls", "--db", "{db}"],
    "results-table.txt": ["results", "table", "--db", "{db}"],
    "sweep-plan-quickstart.txt": ["sweep", "plan", str(ROOT / "examples" / "quickstart.yaml")],
    "sweep-plan-gpu-verdicts.txt": ["sweep", "plan", str(ROOT / "examples" / "gpu-verdicts.yaml"), "--db", "{db}"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_screen_fits_80_columns_and_is_current(name: str, tmp_path: Path) -> None:
    db = tmp_path / "recorded.db"
    shutil.copy(RECORDED, db)
    argv = [a.replace("{db}", str(db)) for a in COMMANDS[name]]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    # Trailing spaces are Rich's padding to the width: not part of what a person reads.
    screen = "\n".join(line.rstrip() for line in result.output.splitlines()) + "\n"
    widest = max(len(line) for line in screen.splitlines())
    assert widest <= 80, f"{name}: a line of {widest} characters"
    path = SCREENS / name
    if os.environ.get("VMATRIX_WRITE_SCREENS"):
        SCREENS.mkdir(exist_ok=True)
        path.write_text(screen)
    assert path.exists(), f"{path} is missing: VMATRIX_WRITE_SCREENS=1 writes it"
    assert path.read_text() == screen, f"{name} differs from what `vmatrix {' '.join(COMMANDS[name])}` prints now"


def test_narrow_table_keeps_every_result_and_wide_keeps_the_grid(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded store's lookup table at 80 columns is a list holding every table
    cell's text (read from the grid the same store gives at full width)."""
    from vmatrix.db.reads import open_sqlite_at_head
    from vmatrix.db.store import Store
    from vmatrix.db.table import lookup_table

    monkeypatch.delenv("COLUMNS", raising=False)  # "piped" below means no width set
    db = tmp_path / "recorded.db"
    shutil.copy(RECORDED, db)
    runner = CliRunner()
    assert runner.invoke(app, ["results", "ls", "--db", str(db)]).exit_code == 0
    Store.open(db).close()  # the copy migrated to head: a read command leaves it as recorded
    source = open_sqlite_at_head(db)
    assert source is not None
    table = lookup_table(source, ["engine"], ["prefix_caching", "speculative"])
    narrow = runner.invoke(app, ["results", "table", "--db", str(db)], env={"COLUMNS": "80"}).output
    assert "┃" not in narrow and max(len(line) for line in narrow.splitlines()) <= 80
    flat = " ".join(narrow.split())
    for (row, col), text in table.cells.items():
        assert " ".join(f"{col} {text}".split()) in flat, (row, col)
    grid = runner.invoke(app, ["results", "table", "--db", str(db), "--wide"], env={"COLUMNS": "80"}).output
    assert "┃" in grid
    piped = runner.invoke(app, ["results", "table", "--db", str(db)]).output  # no terminal, no COLUMNS
    assert piped == grid
