"""The HTML report opened in a real headless Chromium (Debian's ``chromium`` package).

The sweep is a *synthetic recorded run* (see ``test_results_queries.build_sweep``): cells,
outcomes and grades built as dataclasses and recorded through ``Store``; no engine runs.
What is real is the page and the browser: the report must render with no network and
no script, and its DOM must hold one ``data-cell`` row per cell of the sweep.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_results_queries import build_sweep

from db.queries import cell_results
from db.report import write_report
from db.store import Store

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(), reason="headless Chromium is not installed (apt-get install chromium)"
)
# Headless, sandbox off (root in a container), and nothing that reaches the network.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.svgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "tr" and values.get("data-cell"):
            self.cells.append(values["data-cell"] or "")
        self.svgs += tag == "svg"


@pytest.fixture
def report(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    store = Store.open(tmp_path / "results.db")
    try:
        sweep, _ = build_sweep(store)
        path = tmp_path / "report.html"
        write_report(store, sweep, path)
        yield path, [c.cell_id for c in cell_results(store, sweep)]
    finally:
        store.close()


def test_dom_has_a_row_per_cell(report: tuple[Path, list[str]], tmp_path: Path) -> None:
    path, cell_ids = report
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout
    rows = _Rows()
    rows.feed(dom)
    assert rows.cells == cell_ids and len(cell_ids) == 8
    assert rows.svgs == 3  # decode by prompt type, acceptance per position, TTFT cold vs hot
    assert "Sweep 1: quickstart" in dom and "crashed (TypeError:" in dom


def test_screenshot(report: tuple[Path, list[str]], tmp_path: Path) -> None:
    path, _ = report
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1800", path.as_uri())
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 1800)
    assert len(data) > 50_000  # a blank page compresses to a few kB; this one has tables and plots
