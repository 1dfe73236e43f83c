"""`vmatrix publish` on every results DB the project ships under docs/runs, one at a time.

These are real stores, recorded over weeks by different versions of vmatrix: older ones
lack knobs added since (``max_num_seqs``, ``async_scheduling``, the LMCache knobs are
left out of a cell while unset), and one store can mix cells with and without them. Each
DB is copied into a temporary folder first (opening a store migrates it; the files under
docs/runs are never touched), published through the CLI, and its lookup table must hold
every recorded cell of a release with the result the store reads back for it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import copy_to, db_name, shipped
from vmatrix.db.queries import cell_results
from vmatrix.db.store import Store
from vmatrix.orchestrator.cli import app

ROOT = Path(__file__).resolve().parent.parent
RUNS = shipped()
# A square of the index: <td class="slot ..." data-cell="ID"> then its verdict link.
SQUARE = re.compile(r'data-cell="([0-9a-f]{16})">\s*<a class="verdict"[^>]*>([a-z_ ]+)</a>')


def test_docs_runs_has_the_dbs_this_test_is_about() -> None:
    names = {db_name(p) for p in RUNS}
    # The seven that stopped publish with a ValueError before (issue 38), among them.
    assert {"field-bugs-cpu-0.27.1-2026-12-03.db", "field-bugs-cpu-0.32.0-2026-12-02.db",
            "field-notes-cpu-2026-12-02.db", "gpu-h200-field-bugs-0.25.1-2026-12-02.db",
            "gpu-h200-field-bugs-0.26.0-2026-12-03.db"} <= names
    assert len(RUNS) >= 20


@pytest.mark.parametrize("recorded", RUNS, ids=[db_name(p).removesuffix(".db") for p in RUNS])
def test_every_db_under_docs_runs_publishes(recorded: Path, tmp_path: Path) -> None:
    before = hashlib.sha256(recorded.read_bytes()).hexdigest()
    db = copy_to(recorded, tmp_path)
    out = tmp_path / "site"
    result = CliRunner().invoke(app, ["publish", str(out), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    index = (out / "index.html").read_text(encoding="utf-8")
    # Every cell of a release (not a bisect step's commit build) is one square holding its
    # newest result; none is dropped, none shown twice.
    expected = {c.cell_id: c.result for c in cell_results(Store.open(db)) if "+" not in c.vllm_version}
    squares = SQUARE.findall(index)
    assert len(squares) == len(expected)
    assert dict(squares) == expected
    # Every shape has its page.
    keys = set(re.findall(r'href="cells/([0-9a-f]{12})\.html"', index))
    assert keys and {p.stem for p in (out / "cells").glob("*.html")} == keys
    assert hashlib.sha256(recorded.read_bytes()).hexdigest() == before, "the shipped DB was not modified"
