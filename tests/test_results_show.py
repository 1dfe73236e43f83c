"""`vmatrix results show CELL` read by a person, on a real recorded store.

The store is docs/runs/gpu-h200-verdicts-2026-12-01.db.xz: real vLLM 0.26.0 runs of the
canary on an H200 (docs/GPU.md), graded by the grader of that day. Every expected value
below is read from that store's own rows in the test, not written down, so a change to the
view that drops or garbles what was recorded fails here.
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

runner = CliRunner()
RECORDED = unpacked("gpu-h200-verdicts-2026-12-01.db")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "recorded.db"  # a copy: opening a store may migrate it
    shutil.copy(RECORDED, copy)
    return copy


def _newest(db: Path, verdict: str, *, spec: bool | None = None) -> tuple[str, int, dict]:
    """(cell id, run id, evidence) of a run whose newest grade is ``verdict``."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT r.cell_id, r.id, g.verdict, g.evidence, c.knobs FROM runs r JOIN cells c ON c.id = r.cell_id "
        "JOIN grades g ON g.id = (SELECT max(id) FROM grades WHERE run_id = r.id) ORDER BY r.id").fetchall()
    con.close()
    for cell, run, v, evidence, knobs in rows:
        if v == verdict and (spec is None or bool(json.loads(knobs).get("speculative")) == spec):
            return cell, run, json.loads(evidence)
    raise AssertionError(f"the recorded store has no {verdict} run")


def _show(db: Path, cell: str, columns: int = 80, *args: str) -> str:
    result = runner.invoke(app, ["results", "show", cell[:8], "--db", str(db), *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_corrupt_cell_reads_verdict_first_then_the_two_continuations(db: Path) -> None:
    cell, _, evidence = _newest(db, "corrupt")
    out = _show(db, cell)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert lines.index(next(x for x in lines if x.startswith("CORRUPT"))) < 8, "the verdict comes first"
    # "\nlog ": the engine log's line (a not-measured reason may say "its log" too).
    order = [out.index(s) for s in ("CORRUPT", "First divergence", "Coverage", "Latency", "\nlog ")]
    assert order == sorted(order), out
    first = evidence["first"]
    flat = " ".join(" ".join(line.strip("│┃ ").split()) for line in lines)
    # The side-by-side columns fold the texts; every word of each is there, in order.
    for text in (first["cell_text"], first["control_text"]):
        assert all(w in flat for w in text.split()), text
    assert "ground truth" in out, "the canary's requests carry expected answers"
    regressions = {r["key"]: r for r in evidence["recall"]["regressions"]}
    assert first["key"] in regressions, "this run's first divergence is also a wrong answer"
    assert all(w in flat for w in regressions[first["key"]]["expected"]["exact"].split())
    recall = evidence["recall"]
    assert f"recall {recall['cell']}/{recall['requests']}" in out


def test_speculative_cell_shows_acceptance_per_position_from_its_counters(db: Path) -> None:
    cell, run, _ = _newest(db, "clean", spec=True)
    con = sqlite3.connect(db)
    [(raw,)] = con.execute("SELECT counters FROM run_samples WHERE run_id = ?", (run,)).fetchall()
    con.close()
    counters = json.loads(raw)
    drafts = counters["vllm:spec_decode_num_drafts_total"]
    per_pos = [v / drafts for k, v in sorted(counters.items()) if "per_pos" in k]
    out = _show(db, cell)
    line = next(x for x in out.splitlines() if x.startswith("Draft acceptance"))
    assert "  ".join(f"{i + 1}: {v:.1%}" for i, v in enumerate(per_pos)) in line
    for label in ("TTFT", "ITL", "e2e"):
        assert any(x.startswith(f"│ {label}") for x in out.splitlines()), out
    assert "First divergence" not in out, "a clean cell has nothing to show there"


def test_json_keeps_the_whole_document(db: Path) -> None:
    cell, run, evidence = _newest(db, "corrupt")
    doc = json.loads(_show(db, cell, 200, "--format", "json"))
    newest = doc["runs"][0]
    assert newest["summary"]["run_id"] == run and newest["fingerprint"]
    assert newest["grades"][0]["evidence"] == evidence


def test_bad_format_is_one_line_naming_the_option(db: Path) -> None:
    cell, _, _ = _newest(db, "clean")
    result = runner.invoke(app, ["results", "show", cell[:8], "--db", str(db), "--format", "yaml"])
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0 and "--format" in result.output


def test_crashed_run_shows_its_signature_as_the_reason(tmp_path: Path) -> None:
    """A hand-recorded crashed run (no engine): the reason is the run's signature."""
    import time

    from vmatrix.cells import Grade, RunOutcome
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec

    quickstart = Path(__file__).parent.parent / "examples" / "quickstart.yaml"
    plan = expand(load_spec(quickstart, check_index=False), str(quickstart))
    store = Store.open(tmp_path / "r.db")
    sweep = store.create_sweep("q", str(quickstart), quickstart.read_text())
    cell = plan.cells[-1]
    store.add_cell(sweep, cell)
    signature = "TypeError: 'function' object is not subscriptable"
    run = store.record_run(sweep, RunOutcome(cell.id, "crashed", time.time() - 5, time.time(), signature=signature,
                                             log_path="/tmp/engine.log"))
    store.record_grade(run, Grade("crashed", signature, {"signature": signature}))
    store.close()
    out = _show(tmp_path / "r.db", cell.id)
    assert f"CRASHED  {signature}" in out and "log /tmp/engine.log" in out
