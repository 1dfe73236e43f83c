"""Correctness and speed apart, on a real recorded store.

docs/runs/gpu-h200-dflash2-0.26.0-2026-12-02.db.xz: vLLM 0.26.0 on an H200 serving the canary
with its DFlash drafter df1 (docs/dflash2.md). Every answer equals the control's, and the
drafter's tokens are accepted 1.5% of the time; the grader of that day recorded those cells
`degraded` (acceptance_low). Graded again by today's grader (`results regrade`, appended),
they are `clean`, and every view shows the slow drafts beside the verdict. The expected
counts are read from the store's own rows, not written down.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.orchestrator.cli import app

RECORDED = unpacked("gpu-h200-dflash2-0.26.0-2026-12-02.db")
runner = CliRunner()


def _df1_runs(db: Path, which: str = "max") -> list[tuple[int, str, int, str, float, float]]:
    """(sweep, cell id, run id, verdict, accepted, drafted) of every ok df1 run: the newest
    grade's verdict, or with ``which="min"`` the first (the one the run was recorded with;
    grades are appended, and the stored DB has been regraded since)."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT r.sweep_id, r.cell_id, r.id, g.verdict, s.counters FROM runs r JOIN cells c ON c.id = r.cell_id "
        f"JOIN grades g ON g.id = (SELECT {which}(id) FROM grades WHERE run_id = r.id) "
        "JOIN run_samples s ON s.run_id = r.id WHERE r.status = 'ok' AND c.knobs LIKE '%qwen3next-df1%'").fetchall()
    con.close()
    out = []
    for sweep, cell, run, verdict, counters in rows:
        totals = json.loads(counters)
        out.append((sweep, cell, run, verdict, totals["vllm:spec_decode_num_accepted_tokens_total"],
                    totals["vllm:spec_decode_num_draft_tokens_total"]))
    return out


@pytest.fixture(scope="module")
def regraded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, str, int, str, float, float]]]:
    db = tmp_path_factory.mktemp("speed") / "recorded.db"
    shutil.copy(RECORDED, db)
    before = _df1_runs(db, "min")
    assert before and all(v == "degraded" for _, _, _, v, _, _ in before), "recorded under acceptance_low"
    for sweep in sorted({s for s, *_ in before}):
        result = runner.invoke(app, ["results", "regrade", str(sweep), "--db", str(db)])
        assert result.exit_code == 0, result.output
    return db, before


def test_slow_drafts_with_right_answers_grade_clean(regraded) -> None:
    db, before = regraded
    after = _df1_runs(db)
    assert [r[3] for r in after] == ["clean"] * len(before)
    con = sqlite3.connect(db)
    for _, _, run, _, accepted, drafted in after:
        evidence = json.loads(con.execute("SELECT evidence FROM grades WHERE id = (SELECT max(id) FROM grades "
                                          "WHERE run_id = ?)", (run,)).fetchone()[0])
        assert [s["kind"] for s in evidence["speed"]] == ["acceptance_low"]
        assert f"{accepted:.0f} of {drafted:.0f} drafted tokens" in evidence["speed"][0]["detail"]
        assert evidence["symptoms"]["blamed"] == []
    con.close()


def test_every_view_shows_the_speed_finding_beside_the_verdict(regraded) -> None:
    db, before = regraded
    _, cell, _, _, accepted, drafted = before[0]
    finding = f"slow drafts: acceptance {accepted / drafted:.1%} ({accepted:.0f} of {drafted:.0f} drafted tokens)"
    table = runner.invoke(app, ["results", "table", "--db", str(db), "--format", "markdown"])
    assert table.exit_code == 0 and f"clean · {finding}" in table.output
    show = runner.invoke(app, ["results", "show", cell[:12], "--db", str(db)], env={"COLUMNS": "200"})
    assert show.exit_code == 0
    lines = show.output.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("CLEAN"))
    assert lines[verdict + 1].startswith(f"SPEED  {finding}"), "the line right under the verdict"
    ls = runner.invoke(app, ["results", "ls", "--db", str(db)], env={"COLUMNS": "200"})
    assert ls.exit_code == 0 and "clean · slow drafts" in ls.output


def test_the_report_shows_it_beside_the_verdict(regraded, tmp_path: Path) -> None:
    db, before = regraded
    sweep = before[0][0]
    out = tmp_path / "report.html"
    assert runner.invoke(app, ["report", str(sweep), "--db", str(db), "-o", str(out)]).exit_code == 0
    html = out.read_text()
    assert html.count('<div class="speed"') == sum(1 for s, *_ in before if s == sweep)
