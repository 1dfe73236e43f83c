"""The lookup table (`vmatrix results table`): the latest result of every cell, laid out by
two sets of axes, rendered as text, markdown or JSON.

Reads go through ``db/reads.py`` (no SQLAlchemy import), so the command answers from a
fresh process in well under a second on 10,000 cells (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from vmatrix import speed
from vmatrix.cells import LEGACY_VERDICTS, STATUSES, VERDICTS
from vmatrix.db.reads import (
    PREFIX_HITS,
    PREFIX_QUERIES,
    CellResult,
    Readable,
    cell_results,
    counter_values,
    unmeasured_items,
)
from vmatrix.errors import InputError

SIGNATURE_WIDTH = 80
RENDER_WIDTH = 10_000  # text tables wider than this wrap their cells
# A table cell with more results than this shows counts per result instead of listing
# each one: a lookup table is read at a glance, and hundreds of joined results (a large
# sweep's knob combinations folded into one cell) are not. `--full` lists them all.
LISTED_RESULTS = 4
# What a table cell can say of a cell: a verdict, else its run's status, else not run.
RESULTS: tuple[str, ...] = (*VERDICTS, *(s for s in STATUSES if s not in VERDICTS), "not run")
# Verdicts whose claim is "the answers are right": what their grade could not measure is
# shown beside them (`partial` always has some; an older grade's `clean` may too).
QUALIFIED = ("clean", "partial")
UNMEASURED_WIDTH = 28


def result_names(names: list[str] | None) -> frozenset[str] | None:
    """The results ``--verdict`` asks for (old names read as their current ones); None: all."""
    if not names:
        return None
    wanted = set()
    for name in names:
        name = LEGACY_VERDICTS.get(name, name)
        if name not in RESULTS:
            raise InputError.naming("{verdict}: " + f"{name!r} is not one of {', '.join(RESULTS)}")
        wanted.add(name)
    return frozenset(wanted)


def unmeasured_subjects(items: list[str]) -> str:
    """``agent, spec_tail``: what each unmeasured item is about (its text before the first
    colon, or its start), for a table cell; `results show` has the whole reasons."""
    subjects = []
    for item in items:
        head = item.split(":", 1)[0].strip() if ":" in item else item
        subjects.append(head if len(head) <= UNMEASURED_WIDTH else head[: UNMEASURED_WIDTH - 1] + "…")
    return ", ".join(dict.fromkeys(subjects))


@dataclass
class Table:
    """A two-way lookup: one table cell per combination of row and column values."""

    row_keys: list[str]
    col_keys: list[str]
    rows: list[str]  # row header values
    cols: list[str]
    cells: dict[tuple[str, str], str]  # (row, col) -> text; combinations no cell has are absent


def knob_text(value: Any) -> str:
    """A knob value as a short table label."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "off":
        return "off"
    if isinstance(value, dict) and "method" in value:
        text = str(value["method"])
        if "num_speculative_tokens" in value:
            text += f" k={value['num_speculative_tokens']}"
        if value.get("model"):  # two drafters of one method are two columns
            text += " " + str(value["model"]).removeprefix("canary:").rstrip("/").rsplit("/", 1)[-1]
        return text
    if isinstance(value, list):
        return " ".join(knob_text(v) for v in value)
    return str(value)


def _axis_value(cell: CellResult, name: str) -> str:
    if name == "engine":
        return cell.engine
    if name == "model":
        return cell.model_name
    # A knob a cell does not set is at its engine default, which for these toggles is off.
    return knob_text(cell.knobs.get(name))


def _header(cell: CellResult, names: list[str]) -> str:
    return ", ".join(_axis_value(cell, n) for n in names)


def _truncate(text: str, width: int = SIGNATURE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell_text(cell: CellResult, hit_rate: float | None, speed: str | None = None,
               unmeasured: list[str] | None = None) -> str:
    if cell.run_id is None:
        return "not run"
    label = cell.verdict or cell.status or "not run"
    if cell.status != "ok":
        detail = _truncate(cell.signature) if cell.signature else None
    else:
        detail = f"prefix hit {hit_rate:.0%}" if hit_rate is not None else None
    if unmeasured and label in QUALIFIED:
        # Beside the verdict, so a partial (or an old clean) says at a glance what it did not measure.
        gap = f"unmeasured: {unmeasured_subjects(unmeasured)}"
        detail = f"{detail}; {gap}" if detail else gap
    text = f"{label} ({detail})" if detail else label
    # Beside the verdict, never in it: the verdict is about the answers (vmatrix/speed.py).
    return f"{text} · {speed}" if speed else text


def _summary_text(cells: list[CellResult]) -> str:
    """``312 clean · 188 corrupt · 3 crashed``, most frequent first (ties by name, so the
    text does not depend on the order runs were recorded in), then the most frequent
    failure signature, if any run failed with one."""
    counts = Counter(cell.result for cell in cells)
    text = " · ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    failures = Counter(c.signature for c in cells if c.run_id is not None and c.status != "ok" and c.signature)
    if failures:
        # Ties go to the signature seen first, i.e. of the cell created first.
        signature, n = failures.most_common(1)[0]
        text += f"; most frequent failure ({n}x): {_truncate(signature)}"
    return text


def lookup_table(source: Readable, rows: list[str], cols: list[str], sweep_id: int | None = None,
                 full: bool = False, results: frozenset[str] | None = None) -> Table:
    """Latest result of every cell (of one sweep, or of all), laid out by the named axes.

    Each axis name is ``engine``, ``model`` or a knob name. A cell's latest run counts even
    when an earlier or later sweep recorded it: cells are content-addressed, so it is the
    same experiment. A table cell holding more than :data:`LISTED_RESULTS` results shows
    a summary (:func:`_summary_text`) unless ``full``. ``results``: only the cells whose
    result is one of these (:func:`result_names`).
    """
    cells = cell_results(source, sweep_id, with_timings=False)
    if results is not None:
        cells = [c for c in cells if c.result in results]
    # Headers are worked out once per distinct combination of axis values, not once per
    # cell: the knob axes' texts once per knobs dict (cells with the same knobs text
    # share one, cell_results), then the headers once per engine, model and those texts.
    knob_axes = [name for name in (*rows, *cols) if name not in ("engine", "model")]
    axis_texts: dict[int, tuple[str, ...]] = {}
    headers: dict[tuple[str, str, tuple[str, ...]], tuple[str, str]] = {}
    placed = []
    for cell in cells:
        values = axis_texts.get(id(cell.knobs))
        if values is None:
            values = axis_texts[id(cell.knobs)] = tuple(knob_text(cell.knobs.get(name)) for name in knob_axes)
        same = (cell.engine, cell.model_name, values)
        found = headers.get(same)
        if found is None:
            found = headers[same] = (_header(cell, rows), _header(cell, cols))
        placed.append((*found, cell))
    groups: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for row, col, cell in placed:
        groups[row, col].append(cell)
    listed = {key for key, group in groups.items() if full or len(group) <= LISTED_RESULTS}
    # Hit rates only where results are listed one by one: a summary does not show them.
    shown = [c.run_id for key in listed for c in groups[key] if c.run_id is not None]
    # One read of the counters for both details: the prefix hit rate and the speed finding.
    counters = counter_values(source, shown, (PREFIX_HITS, PREFIX_QUERIES, speed.DRAFT_TOKENS, speed.ACCEPTED_TOKENS))
    hit_rates = {run: (hits or 0.0) / queries for run, (hits, queries, _, _) in counters.items() if queries}
    speeds = {run: note for run, (_, _, drafted, accepted) in counters.items()
              if (note := speed.low_acceptance({speed.DRAFT_TOKENS: drafted or 0.0,
                                                 speed.ACCEPTED_TOKENS: accepted or 0.0}))}
    unmeasured = unmeasured_items(source, [c.run_id for key in listed for c in groups[key]
                                           if c.run_id is not None and c.result in QUALIFIED])
    texts: dict[tuple[str, str], str] = {}
    for key, group in groups.items():
        if key in listed:
            texts[key] = " / ".join(
                _cell_text(c, hit_rates.get(c.run_id), speeds.get(c.run_id), unmeasured.get(c.run_id))
                if c.run_id is not None else _cell_text(c, None) for c in group)
        else:
            texts[key] = _summary_text(group)
    # Headers in first-seen order, which follows the order the cells were added.
    return Table(
        row_keys=list(rows),
        col_keys=list(cols),
        rows=list(dict.fromkeys(row for row, _, _ in placed)),
        cols=list(dict.fromkeys(col for _, col, _ in placed)),
        cells=texts,
    )


def corner(table: Table) -> str:
    return f"{', '.join(table.row_keys)} \\ {', '.join(table.col_keys)}"


def _render_text(table: Table) -> str:
    headers = [corner(table), *table.cols]
    body = [[row, *(table.cells.get((row, c), "-") for c in table.cols)] for row in table.rows]
    # As wide as the table wants (up to RENDER_WIDTH), so nothing is wrapped or cut off in
    # the returned string: each column as wide as its widest line plus padding, one rule
    # per column and edge. Worked out here rather than by Console.measure, which on a
    # table over 10,000 cells (cells of ~20,000 characters) took ~0.15 s.
    widths = [max(cell_len(line) for text in column for line in text.split("\n")) for column in zip(headers, *body)]
    natural = sum(widths) + 3 * len(widths) + 1
    width = min(natural, RENDER_WIDTH)
    grid = RichTable()
    for header in headers:
        grid.add_column(Text(header), no_wrap=natural <= RENDER_WIDTH)  # nothing to wrap: skip line breaking
    for values in body:
        # Text, not str: signatures often contain "[...]" that rich would read as markup.
        grid.add_row(*map(Text, values))
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(grid)
    return buffer.getvalue()


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _render_markdown(table: Table) -> str:
    header = [corner(table), *table.cols]
    lines = [
        "| " + " | ".join(_md_escape(h) for h in header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in table.rows:
        values = [row, *(table.cells.get((row, c), "-") for c in table.cols)]
        lines.append("| " + " | ".join(_md_escape(v) for v in values) + " |")
    return "\n".join(lines) + "\n"


def _render_json(table: Table) -> str:
    row_name = ", ".join(table.row_keys)
    objects = [{row_name: row, **{c: table.cells.get((row, c)) for c in table.cols}} for row in table.rows]
    return json.dumps(objects, indent=2, ensure_ascii=False)


def render_table(table: Table, fmt: Literal["text", "json", "markdown"] = "text") -> str:
    renderers = {"text": _render_text, "json": _render_json, "markdown": _render_markdown}
    if fmt not in renderers:
        raise InputError.naming(f"{{format}}: unknown table format {fmt!r}; expected one of {', '.join(renderers)}")
    return renderers[fmt](table)
