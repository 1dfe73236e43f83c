"""The HTML report opened in a real headless Chromium (Debian's ``chromium`` package).

Two stores. A *synthetic recorded run* (see ``test_results_queries.build_sweep``): cells,
outcomes and grades built as dataclasses and recorded through ``Store``; no engine runs.
And a real one: docs/runs/gpu-h200-verdicts-2026-12-01.db.xz, vLLM 0.26.0 on an H200 with
the trained canary (docs/GPU.md), whose plots must show what its runs recorded; its
sweep 1 is the screenshot in docs/ (``VMATRIX_WRITE_SCREENS=1`` writes it again).
What is real in both is the page and the browser: the report must render with no
network and no script, open with the lookup table, and hold one ``data-cell`` row per
cell of the sweep.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_results_queries import build_sweep

from tests.recorded_dbs import unpacked
from vmatrix.db.queries import cell_results
from vmatrix.db.report import write_report
from vmatrix.db.store import Store

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
ROOT = Path(__file__).resolve().parent.parent
RECORDED = unpacked("gpu-h200-verdicts-2026-12-01.db")
SCREENSHOT = ROOT / "docs" / "report-screenshot.png"


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
        self.sections: list[str] = []  # h2 ids, in page order
        self.charts: list[str] = []  # svg aria-labels, in page order
        self.bars: dict[str, list[str]] = {}  # chart -> each bar's hover title

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "tr" and values.get("data-cell"):
            self.cells.append(values["data-cell"] or "")
        if tag == "h2":
            self.sections.append(values.get("id") or "")
        if tag == "svg":
            self.svgs += 1
            self.charts.append(values.get("aria-label") or "")
            self.bars[self.charts[-1]] = []
        if tag == "rect":  # a bar (14 high; legend keys are 10) carries its <title> inside
            self._rect = bool(self.charts) and values.get("height") == "14"

    def handle_data(self, data: str) -> None:
        if getattr(self, "_rect", False) and data.strip():
            self.bars[self.charts[-1]].append(data.strip())
            self._rect = False


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
    # decode tokens/s, acceptance per position, TTFT cold vs hot; no recall plot: these
    # synthetic requests carry no expected answer, and a missing value is not drawn as 0.
    assert rows.svgs == 3 and not any(c.startswith("Recall") for c in rows.charts)
    assert rows.sections[:2] == ["lookup", "plots"]  # the page opens with the table, then the plots
    assert "Sweep 1: quickstart" in dom and "crashed (TypeError:" in dom


def _recorded(tmp_path: Path, sweep: int) -> tuple[_Rows, list[str]]:
    db = tmp_path / "recorded.db"
    shutil.copy(RECORDED, db)
    store = Store.open(db)
    try:
        path = tmp_path / f"report-{sweep}.html"
        write_report(store, sweep, path)
        cell_ids = [c.cell_id for c in cell_results(store, sweep)]
    finally:
        store.close()
    rows = _Rows()
    rows.feed(chromium(tmp_path, "--dump-dom", path.as_uri()).stdout)
    return rows, cell_ids


def test_recorded_h200_sweep_plots_what_its_runs_recorded(tmp_path: Path) -> None:
    """Sweep 1 of the H200 store: four cells, MTP k=3 on two of them. Each plot shows what
    the runs recorded: acceptance only for the MTP cells (three draft positions), recall
    22/22 each, as their grades' evidence says (docs/GPU.md)."""
    rows, cell_ids = _recorded(tmp_path, 1)
    assert rows.cells == cell_ids and len(cell_ids) == 4
    assert rows.sections[:3] == ["lookup", "plots", "heatmap"]
    decode, acceptance, ttft, recall = rows.charts
    assert decode.startswith("Decode tokens/s per cell") and acceptance.startswith("Draft acceptance")
    assert ttft.startswith("TTFT cold vs hot") and recall.startswith("Recall accuracy per cell")
    assert len(rows.bars[acceptance]) == 2 * 3 and all("mtp k=3" in b for b in rows.bars[acceptance])
    assert len(rows.bars[recall]) == 4 and all(b.endswith("recall: 100% (22/22)") for b in rows.bars[recall])
    assert not any("n/a" in b for bars in rows.bars.values() for b in bars)


def test_recorded_corrupt_cell_recalls_less_and_shows_no_acceptance(tmp_path: Path) -> None:
    """Sweep 2 of the H200 store: a patch that corrupts restored state, its control and its
    prefix-caching cell (graded corrupt: recall 19/22 against 22/22). No cell drafts, so
    there is no acceptance plot at all, not a plot of zeros."""
    rows, _ = _recorded(tmp_path, 2)
    assert not any(c.startswith("Draft acceptance") for c in rows.charts)
    recall = next(c for c in rows.charts if c.startswith("Recall"))
    shown = sorted(re.sub(r".*recall: ", "", b) for b in rows.bars[recall])
    assert shown == ["100% (22/22)", "86% (19/22)"]


def test_screenshot(tmp_path: Path) -> None:
    """Of the recorded H200 sweep 1; with VMATRIX_WRITE_SCREENS=1 it becomes docs/report-screenshot.png."""
    db = tmp_path / "recorded.db"
    shutil.copy(RECORDED, db)
    store = Store.open(db)
    try:
        path = tmp_path / "report.html"
        write_report(store, 1, path)
    finally:
        store.close()
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1800", path.as_uri())
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 1800)
    assert len(data) > 50_000  # a blank page compresses to a few kB; this one has tables and plots
    if os.environ.get("VMATRIX_WRITE_SCREENS"):
        shutil.copy(shot, SCREENSHOT)
