"""`vmatrix results merge SRC ... --db DEST` (db/merge.py): every recorded result of each
source copied into DEST under DEST's ids, the references between them rewritten, nothing of
DEST changed, nothing added twice, and a cell stored with two specs refused before anything
is written.

The small stores are recorded through the real Store API; DEST is parametrised like the
store tests (a SQLite file, and with VMATRIX_TEST_PG=1 a PostgreSQL database too). The
end-to-end test merges the two H200 leases of docs/runs whose cells are the same and asks
`vmatrix fixes --together` of the merged DB: every candidate's run is found recorded, so no
engine starts (the sweep runner refuses to start one here).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Text, cast, select
from typer.testing import CliRunner

from tests.recorded_dbs import read_only, unpacked
from vmatrix.cells import Cell, Grade, ModelRef, RunOutcome
from vmatrix.db import merge
from vmatrix.db.merge import TABLES, merge_stores
from vmatrix.db.models import Base
from vmatrix.db.records import BisectRecord, FixesRecord, ShrinkRecord
from vmatrix.db.store import Store
from vmatrix.errors import MergeError
from vmatrix.jobs.noise import NoiseFloor
from vmatrix.orchestrator.cli import app
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord, Transcript

REPO = Path(__file__).resolve().parent.parent
MODEL = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny")
ENGINE = EngineRecipe(vllm="0.26.0")
PATCHED = EngineRecipe(vllm="0.26.0", patches="pr51113")


def make_cell(engine: EngineRecipe, control_id: str | None, **knobs: Any) -> Cell:
    return Cell(Cell.make_id(engine, knobs, MODEL.digest, "w1"), engine, knobs, MODEL, {"name": "w"}, "w1", control_id)


CONTROL = make_cell(ENGINE, None, prefix_caching=False)
SHARED = make_cell(ENGINE, CONTROL.id, prefix_caching=True)  # recorded by both leases
OWN_A = make_cell(PATCHED, CONTROL.id, prefix_caching=True)  # each lease's own cell
OWN_B = make_cell(ENGINE, CONTROL.id, prefix_caching=True, max_num_seqs=8)


def outcome(cell: Cell, at: float, status: str = "ok") -> RunOutcome:
    requests = [RequestRecord(key=f"s{i}/0", session=f"s{i}", turn=0, phase="warm", prompt_tokens=10 + i,
                              token_ids=[i, 2], logprobs=[-0.1, -0.2], margins=[1.5, None], text=f"t{i}",
                              finish_reason="length", ttft_s=0.01, itl_s=[0.02], e2e_s=0.05) for i in range(3)]
    metrics = {"warm": {"vllm:prefix_cache_hits_total": at % 7, "vllm:prefix_cache_queries_total": 40.0}}
    return RunOutcome(cell.id, status, at - 5.0, at,  # type: ignore[arg-type]
                      transcript=Transcript(requests, metrics) if status == "ok" else None,
                      signature=None if status == "ok" else "RuntimeError: boom",
                      fingerprint={"vllm": cell.engine.vllm}, timings={"total_s": 5.0}, gpu_ids=["0"])


def record_lease(store: Store, at: float, own: Cell) -> dict[str, int]:
    """One lease's results: a sweep of the control, the shared cell and ``own``, with a rerun,
    grades (one regraded), a noise floor, and a fixes, bisect and shrink row naming the runs;
    then a `fixes:` sweep. Run ids start at 1 in every lease, as they do in every DB."""
    sweep = store.create_sweep("lease", "m.yaml", f"name: lease-{at}\n")
    for cell in (CONTROL, SHARED, own):
        store.add_cell(sweep, cell)
    control = store.record_run(sweep, outcome(CONTROL, at))
    repeat = store.record_run(sweep, outcome(CONTROL, at + 1))
    store.record_noise_floor(sweep, CONTROL.id, control, repeat, NoiseFloor(3, 3, 0, 0.0, None))
    shared = store.record_run(sweep, outcome(SHARED, at + 2))
    store.record_grade(shared, Grade("corrupt", "1 of 3 wrong", {"requests": 3, "divergent": [{"key": "s1/0"}]},
                                     control))
    store.record_grade(shared, Grade("corrupt", "regraded", {"requests": 3}, control))
    crashed = store.record_run(sweep, outcome(own, at + 3, "crashed"))
    store.record_grade(crashed, Grade("crashed", "RuntimeError: boom", {}, control))
    own_run = store.record_run(sweep, outcome(own, at + 4))
    store.record_grade(own_run, Grade("clean", "3 of 3 right", {"requests": 3}, control))
    store.finish_sweep(sweep)
    fixes_sweep = store.create_sweep("fixes:lease", "sweep 1 (m.yaml)", "name: fixes\n")
    store.record_fixes(FixesRecord(SHARED.id, CONTROL.id, "vllm 0.26.0", "0.26.0", ["pr51113"], False,
                                   [{"candidate": "as recorded", "cell_id": SHARED.id, "run_id": shared},
                                    {"candidate": "pr51113", "cell_id": own.id, "run_id": own_run}],
                                   f"lease {at}", 1.5, fixes_sweep))
    store.record_bisect(BisectRecord("release", "vllm", "0.25.1", "0.26.0", False, "verdict == corrupt",
                                     ["0.25.1", "0.26.0"], [{"candidate": "0.26.0", "run_id": shared}], "bisect", 2.0,
                                     old_cell_id=CONTROL.id, new_cell_id=SHARED.id))
    store.record_shrink(ShrinkRecord(SHARED.id, shared, 2, 3, "verdict == corrupt", ["requests"], "done", 3, 1,
                                     ["s1/0"], [{"level": "requests", "cell_id": own.id}], 0, 2, 3.0))
    return {"sweep": sweep, "control": control, "shared": shared, "own": own_run, "fixes_sweep": fixes_sweep}


def content(store: Store) -> dict[str, Counter[str]]:
    """Every row of every merged table, its ids replaced by what they name (a sweep by name and
    time, a run by cell and times, also inside fixes rows and bisect steps), JSON as its stored
    text (so SQL NULL and JSON null differ): two stores with the same results compare equal
    whatever their ids."""
    out: dict[str, Counter[str]] = {}
    with store.engine.connect() as conn:
        sweeps = {r.id: (r.name, r.created_at) for r in conn.execute(select(Base.metadata.tables["sweeps"]))}
        runs = {r.id: (r.cell_id, r.started_at, r.finished_at) for r in conn.execute(select(Base.metadata.tables["runs"]))}

        def named(column: str, value: Any) -> Any:
            if value is None:
                return None
            if column == "sweep_id":
                return sweeps[value]
            if column in ("run_id", "control_run_id", "repeat_run_id"):
                return runs[value]
            if column in ("rows", "steps"):
                return [{**item, "run_id": named("run_id", item.get("run_id"))} for item in json.loads(value)]
            return value

        for name in TABLES:
            table = Base.metadata.tables[name]
            skip = {"id", "created_at"} if name == "cells" else {"id"}  # DEST keeps the first copy's time
            columns = [cast(c, Text).label(c.name) if isinstance(c.type, JSON) else c
                       for c in table.columns if c.name not in skip]
            out[name] = Counter(repr(tuple(named(k, v) for k, v in r.items()))
                                for r in conn.execute(select(*columns)).mappings())
    return out


def expected(*stores: Store) -> dict[str, Counter[str]]:
    """What merging ``stores`` into an empty DEST must hold: each one's rows, a cell once."""
    parts = [content(s) for s in stores]
    total = {name: sum((p[name] for p in parts), Counter()) for name in TABLES}
    total["cells"] = Counter(dict.fromkeys(total["cells"], 1))
    return total


@pytest.fixture
def leases(tmp_path: Path) -> tuple[Path, Path, dict[str, int], dict[str, int]]:
    """Two leases' stores: A's own cell is the patched engine's, B's a second knob."""
    a, b = Store.open(tmp_path / "a.db"), Store.open(tmp_path / "b.db")
    ids_a = record_lease(a, 1000.0, OWN_A)
    ids_b = record_lease(b, 2000.0, OWN_B)
    a.close()
    b.close()
    return tmp_path / "a.db", tmp_path / "b.db", ids_a, ids_b


def invoke(*argv: str) -> Any:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "250"})


def test_merge_copies_every_result_under_dests_ids(leases, db_url: str) -> None:
    a_path, b_path, _, ids_b = leases
    a, b, dest = Store.open(a_path), Store.open(b_path), Store.open(db_url)
    done = merge_stores(dest, [("a.db", a), ("b.db", b)])
    assert [m.line() for m in done] == [
        "a.db: added 2 sweeps, 3 cells, 5 runs, 4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks",
        ("b.db: added 2 sweeps, 1 cells, 5 runs, 4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks; "
         "already there: 2 cells")]
    # Every row of both, ids aside: runs with their requests, metrics and samples, grades,
    # floors, and the JSON run ids of fixes and bisects naming the same runs as in their lease.
    assert content(dest) == expected(a, b)
    # B's ids were taken by A's rows in DEST: B's references point at B's runs, under new ids.
    (fix_b,) = [f for f in dest.fixes(SHARED.id) if f.answer == "lease 2000.0"]
    shared_b, own_b = (dest.run(r["run_id"]) for r in fix_b.rows)
    assert (shared_b.cell_id, shared_b.finished_at) == (SHARED.id, 2002.0)
    assert (own_b.started_at, own_b.finished_at) == (1999.0, 2004.0) and own_b.id != ids_b["own"]
    assert dest.sweep(fix_b.sweep_id).name == "fixes:lease" and fix_b.sweep_id != ids_b["fixes_sweep"]
    grade = dest.latest_grade(shared_b.id)
    assert grade.summary == "regraded" and dest.run(grade.control_run_id).finished_at == 2000.0
    floor = dest.noise_floor(shared_b.sweep_id, CONTROL.id)
    assert floor is not None and dest.run(floor[1]).finished_at == 2000.0
    assert [s["run_id"] for s in dest.bisects()[1].steps] == [shared_b.id]
    assert dest.shrinks(SHARED.id)[1].run_id == shared_b.id
    # The shared cell's newest run is B's (the later lease), graded as B graded it.
    assert dest.latest_run(SHARED.id).id == shared_b.id
    for store in (a, b, dest):
        store.close()


def test_merging_again_adds_nothing_and_a_grown_source_adds_only_what_is_new(leases, db_url: str) -> None:
    a_path, b_path, ids_a, _ = leases
    a, b, dest = Store.open(a_path), Store.open(b_path), Store.open(db_url)
    merge_stores(dest, [("a.db", a), ("b.db", b)])
    before = content(dest)
    again = merge_stores(dest, [("a.db", a), ("b.db", b)])
    assert again[0].line() == ("a.db: nothing new; already there: 2 sweeps, 3 cells, 5 runs, 4 grades, "
                               "1 noise floors, 1 bisects, 1 fixes, 1 shrinks")
    assert content(dest) == before
    # The lease went on after the merge: a regrade of a merged run, a rerun in the same sweep
    # at the same times as an earlier run (a tie paired in id order), and a new sweep.
    a.record_grade(ids_a["shared"], Grade("clean", "regraded again", {}, ids_a["control"]))
    a.record_run(ids_a["sweep"], outcome(CONTROL, 1000.0))
    later = a.create_sweep("lease", "m.yaml", "name: later\n")
    a.add_cell(later, SHARED)
    a.record_run(later, outcome(SHARED, 3000.0))
    (grown,) = merge_stores(dest, [("a.db", a)])
    assert grown.line() == ("a.db: added 1 sweeps, 2 runs, 1 grades; already there: 2 sweeps, 3 cells, 5 runs, "
                            "4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks")
    assert content(dest) == expected(a, b)
    shared_a = dest.run(dest.fixes(SHARED.id)[0].rows[0]["run_id"])
    assert dest.latest_grade(shared_a.id).summary == "regraded again"
    assert merge_stores(dest, [("a.db", a)])[0].added == Counter()
    for store in (a, b, dest):
        store.close()


def test_a_row_naming_a_run_the_merge_did_not_copy_is_held_back_not_written(leases, tmp_path: Path) -> None:
    """A fixes row whose run was not read (recorded while the source was read; here a run id
    the source has not got) is left for the next merge, never written pointing elsewhere."""
    a_path, _, _, _ = leases
    a, dest = Store.open(a_path), Store.open(tmp_path / "dest.db")
    a.record_fixes(FixesRecord(SHARED.id, CONTROL.id, "vllm 0.26.0", "0.26.0", ["x"], False,
                               [{"candidate": "x", "cell_id": SHARED.id, "run_id": 999}], "later", 1.0))
    (done,) = merge_stores(dest, [("a.db", a)])
    assert done.line().endswith("; held back (recorded while it was read; merge again): 1 fixes")
    assert [f.answer for f in dest.fixes()] == ["lease 1000.0"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_cell_stored_with_another_spec_stops_the_merge_before_anything_is_written(leases, tmp_path: Path) -> None:
    a_path, b_path, _, _ = leases
    dest_path = tmp_path / "dest.db"
    dest = Store.open(dest_path)
    # The same id, another spec: B's own cell as DEST recorded it before its hash changed meaning.
    dest.add_cell(dest.create_sweep("mine", "m.yaml", "name: mine\n"), Cell(
        OWN_B.id, ENGINE, {"prefix_caching": "on"}, MODEL, {"name": "w"}, "w1", CONTROL.id))
    before = content(dest)
    dest.close()
    digest = sha(dest_path)
    out = invoke("results", "merge", str(a_path), str(b_path), "--db", str(dest_path))
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [
        f"error: SRC {b_path}: cell {OWN_B.id} is stored in --db with another spec; nothing merged"]
    assert sha(dest_path) == digest
    assert content(Store.open(dest_path)) == before  # not even A's results, which do not conflict
    # Between two sources: the second names the first; the library names its inputs by field.
    other = Store.open(tmp_path / "other.db")
    other.add_cell(other.create_sweep("x", "m.yaml", "name: x\n"), Cell(
        CONTROL.id, ENGINE, {"prefix_caching": "off"}, MODEL, {"name": "w"}, "w1", None))
    empty = Store.open(tmp_path / "empty.db")
    with pytest.raises(MergeError, match=rf"^src other: cell {CONTROL.id} is stored with another spec in src a; "
                                         "nothing merged$"):
        merge_stores(empty, [("a", Store.open(a_path)), ("other", other)])
    assert content(empty) == {name: Counter() for name in TABLES}


def test_a_source_may_be_a_url_read_as_it_is(db_url: str, tmp_path: Path) -> None:
    """SRC as a SQLAlchemy URL (a PostgreSQL database with VMATRIX_TEST_PG=1), into a file."""
    source = Store.open(db_url)
    url = db_url if "://" in db_url else f"sqlite:///{db_url}"
    record_lease(source, 1000.0, OWN_A)
    out = invoke("results", "merge", url, "--db", str(tmp_path / "dest.db"))
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        f"{url}: added 2 sweeps, 3 cells, 5 runs, 4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks"]
    assert content(Store.open(tmp_path / "dest.db")) == expected(source)
    source.close()


def test_a_source_that_fails_half_way_leaves_dest_as_the_sources_before_it_left_it(
        leases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_path, b_path, _, _ = leases
    a, b, dest = Store.open(a_path), Store.open(b_path), Store.open(tmp_path / "dest.db")
    place = merge._Merge.place

    def failing(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "fixes" and self.merged.source == "b":  # after B's sweeps, runs and grades
            raise RuntimeError("the disk is full")
        return place(self, name, *args, **kwargs)

    monkeypatch.setattr(merge._Merge, "place", failing)
    with pytest.raises(RuntimeError, match="the disk is full"):
        merge_stores(dest, [("a", a), ("b", b)])
    assert content(dest) == expected(a)  # A's transaction stands, none of B's rows


def test_results_ls_and_show_on_dest_list_both_leases_runs(leases, tmp_path: Path) -> None:
    a_path, b_path, _, _ = leases
    dest = tmp_path / "merged.db"
    digests = sha(a_path), sha(b_path)
    out = invoke("results", "merge", str(a_path), str(b_path), "--db", str(dest))
    assert out.exit_code == 0, out.output
    assert (sha(a_path), sha(b_path)) == digests  # a source is only read
    assert out.output.splitlines() == [
        f"{a_path}: added 2 sweeps, 3 cells, 5 runs, 4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks",
        (f"{b_path}: added 2 sweeps, 1 cells, 5 runs, 4 grades, 1 noise floors, 1 bisects, 1 fixes, 1 shrinks; "
         "already there: 2 cells")]
    listed = invoke("results", "ls", "--db", str(dest))
    assert listed.exit_code == 0, listed.output
    rows = [line.split("│")[1:3] for line in listed.output.splitlines() if line.startswith("│")]
    assert sorted(int(run) for run, _ in rows) == list(range(1, 11))
    shown = invoke("results", "show", SHARED.id[:10], "--db", str(dest), "--format", "json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert [r["summary"]["finished_at"] for r in data["runs"]] == [2002.0, 1002.0]  # newest first: B's, A's
    # Each lease's fixes row names its own lease's run of the cell, by DEST's id.
    runs = [r["summary"]["run_id"] for r in data["runs"]]
    assert [f["rows"][0]["run_id"] for f in data["fixes"]] == runs[::-1]
    assert invoke("results", "merge", str(a_path), "--db", str(dest)).output.startswith(f"{a_path}: nothing new")


def test_bad_input_is_one_line_naming_the_argument(leases, tmp_path: Path) -> None:
    a_path, _, _, _ = leases
    missing = invoke("results", "merge", str(a_path), str(tmp_path / "nope.db"), "--db", str(tmp_path / "d.db"))
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines() == [f"error: SRC {tmp_path / 'nope.db'}: no such file"]
    assert not (tmp_path / "d.db").exists()  # nothing opened for writing before every source opened
    packed = tmp_path / "d.db.xz"
    packed.write_bytes(lzma.compress(b""))
    archive = invoke("results", "merge", str(a_path), "--db", str(packed))
    assert archive.exit_code == 2
    assert archive.output.strip().splitlines() == [
        f"error: --db {packed}: a read-only xz archive: decompress it to write to it (xz -dk {packed})"]
    assert invoke("results", "merge", "--db", str(tmp_path / "d.db")).exit_code == 2  # SRC is required


def graded(store: Store) -> int:
    with store.engine.connect() as conn:
        return len(conn.execute(select(Base.metadata.tables["grades"].c.id)).all())


H200_A = REPO / "docs" / "runs" / "gpu-h200-fixes-pr51113-2026-12-03.db.xz"
H200_B = REPO / "docs" / "runs" / "gpu-h200-fixes-pr48375-2026-12-04.db.xz"
STOCK_0251_K3 = "26fc6decc2dcc6fc"  # 0.25.1, prefix caching + MTP k=3: in both leases


def test_two_h200_leases_merged_answer_fixes_together_from_recorded_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pr51113 lease (12-03) and the pr48375 lease (12-04) recorded the same stock cells;
    merged, `vmatrix fixes` finds pr51113's run in the first, pr48375's and both's in the
    second, and answers as docs/FIXES.md says, with no engine and no new grade."""
    from vmatrix.orchestrator.sweep import scheduler

    def no_engine(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an engine would start: a candidate's run was not found recorded")

    monkeypatch.setattr(scheduler, "runtime_named", no_engine)
    monkeypatch.setattr(scheduler, "_start_local_ray", no_engine)
    monkeypatch.chdir(REPO)  # the sweeps' matrix paths (examples/...) are relative to the checkout
    sources = []
    for packed in (H200_A, H200_B):
        plain = tmp_path / packed.name.removesuffix(".xz")
        with lzma.open(packed) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        sources.append(plain)
    dest = tmp_path / "merged.db"
    t0 = time.monotonic()
    out = invoke("results", "merge", *map(str, sources), "--db", str(dest))
    took = time.monotonic() - t0
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        f"{sources[0]}: added 10 sweeps, 20 cells, 96 runs, 102 grades, 18 noise floors, 6 fixes",
        f"{sources[1]}: added 7 sweeps, 12 cells, 72 runs, 80 grades, 19 noise floors, 4 fixes; already there: 6 cells"]
    assert took < 60, took
    a, b, merged = (Store.open(p) for p in (*sources, dest))
    assert content(merged) == expected(a, b)
    grades = graded(merged)

    done = invoke("fixes", STOCK_0251_K3[:8], "--candidate", "pr51113", "--candidate", "pr48375", "--together",
                  "--db", str(dest))
    assert done.exit_code == 0, done.output
    (found,) = [f for f in merged.fixes(STOCK_0251_K3) if f.candidates == ["pr51113", "pr48375"]]
    assert found.answer == (
        "On vllm 0.25.1 (recorded corrupt, 98 of 230 wrong): pr51113 alone leaves 80 of 230 wrong (was 98); "
        "pr48375 alone leaves 13 of 230 wrong (was 98); pr51113+pr48375 leaves 16 of 230 wrong (was 98)")
    assert [r["candidate"] for r in found.rows] == ["as recorded", "pr51113", "pr48375", "pr51113+pr48375"]
    assert all(r["reused"] and r["run_id"] is not None for r in found.rows)
    # Each run is the lease's own: pr51113's from 12-03, the others from 12-04.
    started = {r["candidate"]: merged.run(r["run_id"]).started_at for r in found.rows}
    with a.engine.connect() as conn_a:
        a_starts = set(conn_a.execute(select(Base.metadata.tables["runs"].c.started_at)).scalars())
    assert started["pr51113"] in a_starts
    assert not {started["pr48375"], started["pr51113+pr48375"], started["as recorded"]} & a_starts
    # Every candidate's run was already graded against the cell's control: the merged grades'
    # control runs point at DEST's runs, so nothing was graded again.
    assert graded(merged) == grades
    again = invoke("results", "merge", *map(str, sources), "--db", str(dest))
    assert [line.split(": ", 1)[1].split(";")[0] for line in again.output.splitlines()] == ["nothing new"] * 2
    for store in (a, b, merged):
        store.close()


H200_C = REPO / "docs" / "runs" / "gpu-h200-fixes-pr48375-0.26.0-sweep4-2026-12-04.db.xz"
# 0.26.0's cells of examples/field-bugs-gpu-fixes-pr48375.yaml: PC + MTP k=3, async scheduling
# on (the first three) and off, stock, +pr48375, +pr51113+pr48375.
CELLS_0260 = {"6eb19d3ca4e355b6": "stock", "56e5fb2a54fc73cc": "pr48375", "7708acc7fdb9e59c": "pr51113+pr48375",
              "31adcd1c082b7a9f": "stock, async off", "76c7ebd6372ccf79": "pr48375, async off",
              "dec7a1bf11170e2a": "pr51113+pr48375, async off"}


def test_three_h200_sweeps_of_0260_with_pr48375_say_what_docs_fixes_says() -> None:
    """Issue 39's three sweeps of 0.26.0 (docs/FIXES.md, "On the H200: PR 48375"): the
    12-04 lease's two graded ones (its first lost the patched cells' starts, or their controls',
    to GPU memory; the stock cell with async on started and is graded in all three) and the
    sweep of the next lease, read as recorded. Each cell's newest grade a sweep, in order."""
    seen: dict[str, list[str]] = {cell: [] for cell in CELLS_0260}
    for packed in (H200_B, H200_C):
        con = read_only(unpacked(packed.name.removesuffix(".xz")))
        rows = con.execute(
            "SELECT r.cell_id, g.verdict, g.summary FROM runs r JOIN grades g ON g.run_id = r.id "
            "AND g.id = (SELECT max(id) FROM grades WHERE run_id = r.id) WHERE r.status = 'ok' "
            "ORDER BY r.sweep_id").fetchall()
        con.close()
        for cell, verdict, summary in rows:
            if cell in seen and verdict not in ("control", "ungraded"):  # ungraded: its control's start failed
                seen[cell].append(verdict if verdict != "corrupt" else f"corrupt {summary.split('/')[0]}")
    assert {CELLS_0260[c]: v for c, v in seen.items()} == {
        "stock": ["corrupt 13"] * 4, "pr48375": ["corrupt 25"] * 3, "pr51113+pr48375": ["corrupt 29"] * 3,
        "stock, async off": ["corrupt 4"] * 3, "pr48375, async off": ["unexercised"] * 3,
        "pr51113+pr48375, async off": ["unexercised"] * 3}
