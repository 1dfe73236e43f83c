"""One self-contained HTML page per sweep: the lookup table, then plots per cell (decode
tokens/s, draft acceptance per position, TTFT cold vs hot, recall accuracy), the verdict
heatmap, the runs, and the evidence behind every result that is not clean.

The page must open anywhere a results file is attached (a CI artifact, an issue), so
it loads nothing: styles are inline and the plots are SVG computed here, laid out in
Python and written by the Jinja2 template (which escapes every recorded string).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from vmatrix import speed
from vmatrix.db.compare import RunSamples, decode_by_prompt_type, load_samples, mean_present, ttft_cold_hot
from vmatrix.db.counters import Rates, rates
from vmatrix.db.evidence import unmeasured_of
from vmatrix.db.fixes import result_text, run_text, shapes_text, wrong_text
from vmatrix.db.queries import (
    CellResult,
    GradeDetail,
    SweepInfo,
    Table,
    cell_results,
    knob_text,
    latest_grades_for,
    lookup_table,
    metric_totals_for,
    sweep_info,
)
from vmatrix.db.reads import RecallCount, recall_counts
from vmatrix.db.records import FixesRecord
from vmatrix.db.store import Store

TEMPLATES = Path(__file__).resolve().parent / "templates"
# Results that need no explanation; every other one gets an evidence section (`partial`
# too: its evidence says what was not measured).
UNREMARKABLE = {"clean", "control"}
RESULT_COLORS = {
    "control": "#9ecae1",
    "clean": "#74c476",
    # Matched its control, part of the claim unmeasured: yellow-green, between clean's
    # green and the colours of results that need a look; never clean's colour.
    "partial": "#e6f598",
    "ok": "#c7e9c0",  # ran, not graded yet
    "degraded": "#fdd0a2",
    "unexercised": "#d4b9da",  # matched its control, but what it tests did not happen
    "corrupt": "#fd8d3c",
    "crashed": "#de2d26",
    "startup_failed": "#9e9ac8",
    "timeout": "#fed976",
    "invalid": "#969696",  # cannot run as specified (geometry rule, or no pause for a gate)
    "ungraded": "#d9d9d9",
    "task_failed": "#bdbdbd",  # vmatrix's task died: nothing measured, run again
    "not run": "#ffffff",
}
# What each result means, for the legends of the report and the site (docs/GRADING.md
# has the rules behind them).
RESULT_MEANINGS = {
    "control": "the reference the other cells are graded against",
    "clean": "answers matched the control, and what the cell tests happened and was measured",
    "partial": "answers matched the control, but part of what the cell claims was not measured (listed as "
               "unmeasured: say, no asked line inside a block a prefix-cache hit restored)",
    "unexercised": "answers matched the control, but what the cell tests did not happen (no hits, no drafts)",
    "degraded": "answers matched the control, with a symptom (a slowdown, a repetition) or a recall drop",
    "corrupt": "answers differ from the control beyond its noise floor",
    "crashed": "the engine died during the replay",
    "startup_failed": "the engine never became healthy",
    "timeout": "the engine did not answer in time: not ready, hung (running, nothing sent for timeouts.stall_s), "
               "or the replay past its limit",
    "invalid": "the cell cannot run as specified: its knobs break a geometry rule (no engine started), or its "
               "engine cannot hold a gated phase (no scheduler pause)",
    "ungraded": "its control has no run to grade against",
    "task_failed": "vmatrix's task for the cell died (worker or node lost, vmatrix not importable there, a bug in "
                   "vmatrix): nothing was measured about the stack; `sweep run` runs it again",
    "ok": "ran, not graded yet",
    "not run": "no run recorded",
}
SERIES_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")

# Bar chart geometry, in SVG user units (= CSS px at 100%).
LABEL_W = 430
PLOT_W = 560
VALUE_W = 80
BAR_H = 14
BAR_GAP = 3
GROUP_GAP = 12
TOP = 28
AXIS_H = 26


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    color: str
    series: str
    text: str  # the value as shown


@dataclass(frozen=True)
class BarGroup:
    label: str
    title: str  # full label, shown on hover
    y: float  # vertical centre of the group
    bars: list[Bar]


@dataclass(frozen=True)
class BarChart:
    """A horizontal grouped bar chart, laid out; the template only draws it."""

    title: str
    width: float
    height: float
    plot_x: float
    plot_w: float
    axis_y: float
    groups: list[BarGroup]
    ticks: list[tuple[float, str]]  # (x, label)
    legend: list[tuple[str, str]]  # (series, color)


def nice_ticks(maximum: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``maximum`` (steps of 1, 2 or 5 x 10^k)."""
    if maximum <= 0 or not math.isfinite(maximum):
        return [0.0, 1.0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(maximum / step - 1e-9) + 1)]


def _short(text: str, width: int = 66) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


Value = float | tuple[float, str] | None  # a bar's value, or its value and the text shown for it


def _value(v: Value) -> float | None:
    return v[0] if isinstance(v, tuple) else v


def bar_chart(
    title: str,
    rows: list[tuple[str, dict[str, Value]]],
    series: list[str],
    fmt: str = "{:.1f}",
    maximum: float | None = None,
    tick_fmt: str = "{:g}",
) -> BarChart | None:
    """Lay out one bar per (row, series) that has a value; None where no row has any.

    A missing value (no MTP, no ground truth, no request answered) draws nothing, not a
    zero: its slot in the group stays empty, and a row with no value at all is left out.
    """
    rows = [(label, by_series) for label, by_series in rows if any(_value(v) is not None for v in by_series.values())]
    values = [x for _, by_series in rows for v in by_series.values() if (x := _value(v)) is not None]
    if not values:
        return None
    ticks = nice_ticks(maximum if maximum is not None else max(values))
    scale = PLOT_W / ticks[-1]
    colors = {s: SERIES_COLORS[i % len(SERIES_COLORS)] for i, s in enumerate(series)}
    groups, y = [], float(TOP)
    group_h = len(series) * (BAR_H + BAR_GAP) - BAR_GAP
    for label, by_series in rows:
        bars = []
        for i, name in enumerate(series):
            value = _value(by_series.get(name))
            if value is None:
                continue
            shown = by_series[name]
            bars.append(
                Bar(
                    x=LABEL_W,
                    y=y + i * (BAR_H + BAR_GAP),
                    width=max(value * scale, 0.0),
                    color=colors[name],
                    series=name,
                    text=shown[1] if isinstance(shown, tuple) else fmt.format(value),
                )
            )
        groups.append(BarGroup(_short(label), label, y + group_h / 2, bars))
        y += group_h + GROUP_GAP
    axis_y = y - GROUP_GAP + 6
    return BarChart(
        title=title,
        width=LABEL_W + PLOT_W + VALUE_W,
        height=axis_y + AXIS_H,
        plot_x=LABEL_W,
        plot_w=PLOT_W,
        axis_y=axis_y,
        groups=groups,
        ticks=[(LABEL_W + t * scale, tick_fmt.format(round(t, 12))) for t in ticks],
        legend=list(colors.items()),
    )


@dataclass(frozen=True)
class CellView:
    """One cell as the report shows it."""

    cell: CellResult
    label: str  # engine and the knobs that vary in this sweep
    knobs: str
    color: str
    requests: int
    unanswered: int  # requests without a first token: failed, or cut off
    ttft_mean: float | None
    ttft_cold: float | None
    ttft_hot: float | None
    decode_mean: float | None
    decode_by_type: dict[str, float | None]
    rates: Rates
    recall: RecallCount | None  # answers right of those with an expected answer; None: no ground truth
    grade: GradeDetail | None
    evidence_json: str | None
    total_s: float | None
    speed: str | None = None  # a speed finding (vmatrix/speed.py), shown beside the verdict

    @property
    def unmeasured(self) -> list[str]:
        """What its grade could not measure: beside a `partial` (or an older grade's `clean`)."""
        return unmeasured_of(self.grade.evidence if self.grade else None)


@dataclass(frozen=True)
class Heatmap:
    rows: list[str]
    cols: list[str]
    slots: dict[tuple[str, str], list[CellView]]


@dataclass
class Report:
    sweep: SweepInfo
    generated_at: float
    table: Table
    heatmap: Heatmap
    cells: list[CellView]
    counts: dict[str, int]
    charts: list[BarChart] = field(default_factory=list)
    result_colors: dict[str, str] = field(default_factory=lambda: dict(RESULT_COLORS))
    # `vmatrix fixes` searches about this sweep's cells, or run as this sweep: oldest first.
    fixes: list[FixesRecord] = field(default_factory=list)

    @property
    def legend(self) -> list[tuple[str, str]]:
        return legend(dict(sorted(self.counts.items())))

    @property
    def remarkable(self) -> list[CellView]:
        return [c for c in self.cells if c.cell.result not in UNREMARKABLE]


def legend(counts: dict[str, int]) -> list[tuple[str, str]]:
    """(result, what it means) for each result counted, in the counts' order."""
    return [(result, RESULT_MEANINGS[result]) for result in counts if result in RESULT_MEANINGS]


def varying_knobs(cells: list[CellResult]) -> list[str]:
    """Knob names whose value differs between cells: the sweep's axes, in first-seen order."""
    names = dict.fromkeys(k for c in cells for k in c.knobs)
    return [
        n for n in names if len({json.dumps(c.knobs.get(n), sort_keys=True, default=str) for c in cells}) > 1
    ]


def _knobs_text(cell: CellResult, names: list[str]) -> str:
    return ", ".join(f"{n}={knob_text(cell.knobs.get(n))}" for n in names) or "defaults"


def cell_view(cell: CellResult, axes: list[str], samples: RunSamples, totals: dict[str, float],
          grade: GradeDetail | None, recall: RecallCount | None = None) -> CellView:
    knobs = _knobs_text(cell, axes)
    cold, hot = ttft_cold_hot(samples)
    total_s = (cell.timings or {}).get("total_s")
    return CellView(
        cell=cell,
        label=f"{cell.engine} · {knobs}",
        knobs=knobs,
        color=RESULT_COLORS.get(cell.result, "#ffffff"),
        requests=len(samples.keys),
        unanswered=sum(t is None for t in samples.ttft_s),
        ttft_mean=mean_present(samples.ttft_s),
        ttft_cold=cold,
        ttft_hot=hot,
        decode_mean=mean_present(samples.decode_tps),
        decode_by_type=decode_by_prompt_type(samples),
        rates=rates(totals),
        recall=recall,
        grade=grade,
        evidence_json=json.dumps(grade.evidence, indent=2, ensure_ascii=False) if grade and grade.evidence else None,
        total_s=total_s,
        speed=speed.low_acceptance(totals),
    )


def _charts(views: list[CellView]) -> list[BarChart]:
    """Decode tokens/s, acceptance per draft position, TTFT cold vs hot and recall, per cell,
    each from what the cell's run recorded."""
    kinds = list(dict.fromkeys(k for v in views for k in v.decode_by_type))
    decode = bar_chart(
        "Decode tokens/s per cell (after the first token, mean over requests, by prompt type)",
        [(v.label, dict(v.decode_by_type)) for v in views if v.requests],
        kinds,
    )
    ttft = bar_chart(
        "TTFT cold vs hot (s, mean): cold = the first phase, before anything is cached; hot = later phases",
        [(v.label, {"cold": v.ttft_cold, "hot": v.ttft_hot}) for v in views if v.requests],
        ["cold", "hot"],
        fmt="{:.3f}",
    )
    positions = max((len(v.rates.acceptance_per_position) for v in views), default=0)
    names = [f"position {p}" for p in range(positions)]
    acceptance = bar_chart(
        "Draft acceptance per position (accepted / drafts)",
        [
            (v.label, dict(zip(names, v.rates.acceptance_per_position)))
            for v in views
            if v.rates.acceptance_per_position
        ],
        names,
        fmt="{:.0%}",
        maximum=1.0,
        tick_fmt="{:.0%}",
    )
    recall = bar_chart(
        "Recall accuracy per cell (answers equal to the workload's expected answer, of the requests answered)",
        [(v.label, {"recall": (v.recall.accuracy, f"{v.recall.accuracy:.0%} ({v.recall.right}/{v.recall.requests})")})
         for v in views if v.recall is not None],
        ["recall"],
        maximum=1.0,
        tick_fmt="{:.0%}",
    )
    return [c for c in (decode, acceptance, ttft, recall) if c is not None]


def build_report(store: Store, sweep_id: int) -> Report:
    info = sweep_info(store, sweep_id)
    cells = cell_results(store, sweep_id)
    axes = varying_knobs(cells)
    run_ids = [c.run_id for c in cells if c.run_id is not None]
    samples = load_samples(store, run_ids)
    totals = metric_totals_for(store, run_ids)
    # Every grade but a control's: a clean one too, for what it could not measure.
    grades = latest_grades_for(store, [c.run_id for c in cells if c.run_id and c.result != "control"])
    recalls = recall_counts(store, run_ids)
    views = [
        cell_view(
            c,
            axes,
            samples.get(c.run_id, RunSamples()) if c.run_id is not None else RunSamples(),
            totals.get(c.run_id, {}) if c.run_id is not None else {},
            grades.get(c.run_id) if c.run_id is not None else None,
            recalls.get(c.run_id) if c.run_id is not None else None,
        )
        for c in cells
    ]
    slots: dict[tuple[str, str], list[CellView]] = defaultdict(list)
    for v in views:
        slots[v.cell.engine, v.knobs].append(v)
    counts: dict[str, int] = defaultdict(int)
    for v in views:
        counts[v.cell.result] += 1
    return Report(
        sweep=info,
        generated_at=time.time(),
        table=lookup_table(store, ["engine"], ["prefix_caching", "speculative"], sweep_id=sweep_id),
        heatmap=Heatmap(
            rows=list(dict.fromkeys(v.cell.engine for v in views)),
            cols=list(dict.fromkeys(v.knobs for v in views)),
            slots=dict(slots),
        ),
        cells=views,
        counts=dict(counts),
        charts=_charts(views),
        fixes=[f for f in store.fixes() if f.cell_id in {c.cell_id for c in cells} or f.sweep_id == sweep_id],
    )


def _fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _fmt(value: float | None, spec: str = "{:.2f}") -> str:
    return "-" if value is None else spec.format(value)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _fmt_time
    env.filters["num"] = _fmt
    env.globals.update(fix_result=result_text, fix_wrong=wrong_text, fix_shapes=shapes_text, fix_run=run_text)
    return env


def render_report(report: Report) -> str:
    return environment().get_template("report.html.j2").render(report=report)


def write_report(store: Store, sweep_id: int, path: Path) -> Report:
    report = build_report(store, sweep_id)
    path.write_text(render_report(report), encoding="utf-8")
    return report
