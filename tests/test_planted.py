"""A planted positive control must plant before its `clean` means anything (orchestrator/
sweep/planted.py). On 2026-12-05 the CUDA zeroing set ran on Nemotron-H in mamba cache mode
`all`, where its hook never runs, and its prefix-caching cells graded `clean`.

The grading tests feed a recorded run to the grader (they say so): the H100 lease's
0.25.1 prefix-caching cell with `zero-restored-state-cuda` (run 19 of
docs/runs/gpu-h100-n1c-gated-2026-12-05.db.xz, 49/49 identical to its control), graded with
three engine logs: none at hand, the real one's lines without the set's (its log said "Mamba
cache mode is set to 'all'"), and one with the set's line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recorded_dbs import RUNS, copy_to
from vmatrix.cells import RunOutcome
from vmatrix.db.store import Store
from vmatrix.images.recipe import patch_set_digest, planted_lines
from vmatrix.orchestrator.cli.regrade import recorded_cell
from vmatrix.orchestrator.spec.workload import Grading
from vmatrix.orchestrator.sweep.grading import grade_cell
from vmatrix.recipe import EngineRecipe

LINE = "zero-restored-state-cuda: zeroed the recurrent state"
DB = RUNS / "gpu-h100-n1c-gated-2026-12-05.db.xz"
# Lines of the recorded run's engine log (its host's /root/vmatrix-data/logs/191dd19365fb7876-*.log).
REAL_LOG = (
    "(APIServer pid=2772) WARNING 12-05 10:08:42 [config.py:563] Mamba cache mode is set to 'all' for "
    "NemotronHForCausalLM by default when prefix caching is enabled\n"
    "(EngineCore pid=3000) INFO 12-05 10:11:27 [ssu_dispatch.py:224] Using triton Mamba SSU backend.\n")


def test_a_planted_set_says_its_line_and_stock_engines_have_none() -> None:
    zeroing = EngineRecipe("0.25.1", accelerator="cuda", patches="zero-restored-state-cuda")
    assert planted_lines(zeroing) == {"zero-restored-state-cuda": LINE}
    assert planted_lines(EngineRecipe("0.32.0", patches="zero-restored-state")) == {
        "zero-restored-state": "zero-restored-state: zeroed the recurrent state"}
    assert planted_lines(EngineRecipe("0.25.1", accelerator="cuda")) == {}
    assert planted_lines(EngineRecipe("0.32.0", patches="cpu-default-block-reset")) == {}
    # planted.txt is not a patch: the set's digest, and so its recorded cells' ids, do not see it.
    from vmatrix.images.recipe import files_digest, set_patches
    assert patch_set_digest("zero-restored-state-cuda") == files_digest(
        [(f.name, f.read_bytes()) for _, f in set_patches("zero-restored-state-cuda")])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    store = Store.open(str(copy_to(DB, tmp_path_factory.mktemp("db"))))
    run = store.run(19)
    cell = recorded_cell(store.cell_spec(run.cell_id))
    assert cell is not None and cell.knobs["prefix_caching"] and cell.engine.patches == "zero-restored-state-cuda"
    transcript, _ = store.regrade_read(run.id)
    return store, cell, run, transcript


@pytest.mark.parametrize(("log", "earlier", "verdict", "said"), [
    (None, None, "partial", "planted set zero-restored-state-cuda: the engine's log is not at hand"),
    (REAL_LOG, None, "unexercised", f"planted set zero-restored-state-cuda never fired (no '{LINE}'"),
    (REAL_LOG + f"WARNING {LINE} restored by a prefix-cache hit for req-1\n" * 3, None, "clean", None),
    # A regrade where the log is gone reads what the first grade counted.
    (None, [{"planted": {"zero-restored-state-cuda": 0}}], "unexercised", "never fired"),
    (None, [{"planted": {"zero-restored-state-cuda": 17}}], "clean", None),
], ids=["no-log", "silent", "fired", "kept-silent", "kept-fired"])
def test_a_planted_cell_that_did_not_plant_is_not_clean(recorded, tmp_path: Path, log: str | None,
                                                        earlier: list | None, verdict: str, said: str | None) -> None:
    store, cell, run, transcript = recorded
    path = None
    if log is not None:
        (path := tmp_path / "engine.log").write_text(log)
    outcome = RunOutcome(cell.id, run.status, run.started_at, run.finished_at, transcript=transcript,
                         log_path=str(path) if path else None)
    grade = grade_cell(store, cell, outcome, Grading(), engine_block=384, earlier=earlier)
    assert grade.verdict == verdict, grade.summary
    if said:
        assert said in grade.summary
        assert grade.evidence["first"]["reason"] == verdict
    counted = grade.evidence["planted"]["zero-restored-state-cuda"]
    assert counted == (3 if log and LINE in log else 0 if log else (earlier[0]["planted"]["zero-restored-state-cuda"]
                                                                    if earlier else None))


def test_results_show_says_what_a_planted_set_did(tmp_path: Path) -> None:
    """`results show` of the recorded zeroing cell (regraded with its real engine log, which
    held no "zeroed" line) names the silent set as a gap; a set that fired says how often."""
    from rich.console import Console
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app
    from vmatrix.orchestrator.cli.show_view import _coverage

    out = " ".join(CliRunner().invoke(app, ["results", "show", "191dd193", "--db", str(DB)]).output.split())
    assert "UNEXERCISED" in out and f"gap: planted set zero-restored-state-cuda never fired (no '{LINE}'" in out, out
    console = Console(width=200, record=True)
    console.print(_coverage({"planted": {"zero-restored-state-cuda": 17}, "coverage": {}}, {}))
    assert "planted zero-restored-state-cuda: fired 17 time(s) in the engine's log" in console.export_text()
