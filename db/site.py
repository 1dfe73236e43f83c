"""The results DB as a static site (`vmatrix publish DIR`), the way asv publishes its history.

Pages: ``index.html``, the lookup table of every stack (releases x cells, verdict colours,
the cells whose verdict changed since the previous release marked and linked to the
bisect that answered why), a page per cell (``cells/KEY.html``: its verdict and speed
across releases, plotted, and the evidence of every result that is not clean: the first
divergence side by side with the control's and the ground truth, coverage), and a page
per bisect (``bisects/N.html``: steps, first bad or good, the commit range and its
link). A *cell* here is what stays the same across releases: the engine kind (accelerator,
patch set, LMCache), model, workload and knobs; its result on each release is that
release's content-addressed cell.

Offline like the report: no script, no font or CDN, one stylesheet next to the pages,
relative links only, so it opens from ``file://``. Deterministic: nothing on a page
depends on when it was written, and a file whose content did not change is not
written again, so publishing with nothing new changes no file.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from db.compare import RunSamples, load_samples
from db.evidence import expectations_for, ground_truth
from db.queries import CellResult, GradeDetail, cell_results, knob_text, latest_grades_for, metric_totals_for
from db.reads import RecallCount, recall_counts
from db.report import RESULT_COLORS, UNREMARKABLE, BarChart, CellView, bar_chart, cell_view, environment, varying_knobs
from db.store import BisectRecord, Store
from vmatrix.cells import direction

STYLESHEET = "site.css"
CHANGE_MARK = {"better": ("▲", "fixed"), "worse": ("▼", "regressed"), "changed": ("◆", "changed")}
# Where a bisect's commit range is shown; vLLM tags its releases vX.Y.Z.
UPSTREAM = "https://github.com/vllm-project/vllm"


def _release(version: str) -> Version | None:
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return None if v.local else v  # a commit build (0.30.0+g0123abc) is a bisect step, not a release


@dataclass
class Slot:
    """One cell on one release: a square of the lookup table."""

    release: str
    view: CellView
    previous: str | None = None  # the release below with a result, if any
    change: str | None = None  # better / worse / changed, against that release
    bisects: list[BisectRecord] = field(default_factory=list)  # between the two

    @property
    def result(self) -> str:
        return self.view.cell.result

    @property
    def mark(self) -> tuple[str, str] | None:
        return CHANGE_MARK.get(self.change) if self.change else None


@dataclass
class Evidence:
    """What the cell page shows for one release whose result is not clean."""

    release: str
    slot: Slot
    grade: GradeDetail | None
    first: dict[str, Any]
    where: str
    columns: list[tuple[str, str]]  # (cell | control | ground truth, text)
    coverage: list[str]
    evidence_json: str | None


@dataclass
class Shape:
    """A cell across releases: a column of a stack's table and a page of its own."""

    key: str
    stack: Stack
    label: str  # the knobs that vary within its stack
    knobs: str  # all its knobs
    control: bool
    slots: dict[str, Slot] = field(default_factory=dict)  # release -> slot
    charts: list[BarChart] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.stack.title} · {self.knobs}"

    def rows(self) -> list[Slot]:
        """Its slots, newest release first."""
        return [self.slots[r] for r in self.stack.releases if r in self.slots]


@dataclass
class Stack:
    """One lookup table: an engine kind, model and workload; releases x cells."""

    key: str
    title: str
    releases: list[str] = field(default_factory=list)  # newest first
    shapes: list[Shape] = field(default_factory=list)
    shared: str = ""  # the knobs every cell of it sets alike (not at their defaults)


@dataclass
class BisectPage:
    record: BisectRecord
    old: Shape | None
    new: Shape | None
    range_url: str | None
    range_text: str | None

    @property
    def found(self) -> str:
        r = self.record
        if r.error:
            return f"no answer: {r.error}"
        unit = "release" if r.mode == "release" else "commit"
        first, last = ("first good", "last bad") if r.find_fix else ("first bad", "last good")
        text = f"{first} {unit}: {_short(r.first_new)} ({last}: {_short(r.last_old)})"
        if r.untested:
            text += f"; untested in between: {', '.join(map(_short, r.untested))}"
        return text


@dataclass
class Site:
    stacks: list[Stack]
    bisects: list[BisectPage]
    counts: dict[str, int]
    newest_run: float | None
    result_colors: dict[str, str] = field(default_factory=lambda: dict(RESULT_COLORS))


def _short(candidate: str | None) -> str:
    if candidate is None:
        return "-"
    return candidate[:12] if len(candidate) == 40 and all(c in "0123456789abcdef" for c in candidate) else candidate


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _workloads(store: Store) -> dict[str, str]:
    """Each cell's workload name, from the cell as it was recorded."""
    with store.reader() as rc:
        rows = rc.rows("SELECT id, spec FROM cells")
    out = {}
    for cell_id, spec in rows:
        spec = json.loads(spec) if isinstance(spec, str) else spec
        out[cell_id] = str((spec.get("workload") or {}).get("name", "workload"))
    return out


def _knobs_text(knobs: dict[str, Any], names: list[str]) -> str:
    return ", ".join(f"{n}={knob_text(knobs.get(n))}" for n in names) or "defaults"


def _set(knobs: dict[str, Any], defaults: dict[str, Any] | None) -> list[str]:
    """The knobs a cell sets: not at the matrix's defaults (given), else not off or empty."""
    if defaults is not None:
        return [n for n, v in knobs.items() if v != defaults.get(n)]
    return [n for n, v in knobs.items() if v not in (None, False, [], "off")]


def _range_link(record: BisectRecord) -> tuple[str | None, str | None]:
    if record.error or record.last_old is None or record.first_new is None:
        return None, None
    if record.mode == "release":
        old, new = f"v{record.last_old}", f"v{record.first_new}"
        return f"{UPSTREAM}/compare/{old}...{new}", f"the commits from {old} to {new}"
    return (f"{UPSTREAM}/compare/{record.last_old}...{record.first_new}",
            f"{_short(record.last_old)}..{_short(record.first_new)}")


def _evidence(store: Store, slot: Slot, grade: GradeDetail | None) -> Evidence:
    ev = grade.evidence if grade else {}
    first = dict(ev.get("first") or {})
    where = ""
    if "key" in first:
        where = f"session {first.get('session')} turn {first.get('turn')}"
        if first.get("token_index") is not None:
            where += f", token {first['token_index']}"
        if first.get("control_margin") is not None:
            where += f" (control's top-1/top-2 margin {first['control_margin']:.2f})"
    columns = []
    if "key" in first:
        failed = f"(no answer: {first['error']})" if first.get("error") else ""
        columns.append(("cell", first.get("cell_text") or failed))
        if "control_text" in first:
            columns.append(("control", first.get("control_text") or ""))
        run_id = slot.view.cell.run_id
        truth = ground_truth(ev, expectations_for(store, run_id) if run_id is not None else {})
        if truth is not None:
            columns.append(("ground truth", truth))
    coverage = []
    if (recall := ev.get("recall")) and recall.get("requests"):
        coverage.append(f"recall {recall.get('cell')}/{recall.get('requests')} "
                        f"(control {recall.get('control')}/{recall.get('requests')})")
    if "requests" in ev and "identical" in ev:
        coverage.append(f"{ev['identical']}/{ev['requests']} requests identical to control")
    cov = ev.get("coverage") or {}
    flags = [f"{k} {'yes' if v else 'no'}" for k, v in (cov.get("exercised") or {}).items() if isinstance(v, bool)]
    if flags:
        coverage.append("exercised: " + ", ".join(flags))
    if slot.view.rates.prefix_hit_rate is not None:
        coverage.append(f"prefix cache hit rate {slot.view.rates.prefix_hit_rate:.1%}")
    coverage += [f"gap: {gap}" for gap in cov.get("gaps") or ()]
    return Evidence(slot.release, slot, grade, first, where, columns, coverage,
                    json.dumps(ev, indent=2, ensure_ascii=False, sort_keys=True) if ev else None)


def _recall_text(view: CellView) -> str:
    assert view.recall is not None
    return f"{view.recall.accuracy:.0%} ({view.recall.right}/{view.recall.requests})"


def _charts(shape: Shape) -> list[BarChart]:
    """The cell's speed and answers per release, newest release first."""
    rows = [s for s in shape.rows() if s.view.requests]
    kinds = list(dict.fromkeys(k for s in rows for k in s.view.decode_by_type))
    charts = [
        bar_chart("Decode tokens/s per release (after the first token, mean over requests, by prompt type)",
                  [(s.release, dict(s.view.decode_by_type)) for s in rows], kinds),
        bar_chart("TTFT cold vs hot per release (s, mean)",
                  [(s.release, {"cold": s.view.ttft_cold, "hot": s.view.ttft_hot}) for s in rows], ["cold", "hot"],
                  fmt="{:.3f}"),
        bar_chart("Draft acceptance per release (accepted / drafted tokens)",
                  [(s.release, {"acceptance": s.view.rates.spec_acceptance}) for s in rows], ["acceptance"],
                  fmt="{:.1%}", maximum=1.0, tick_fmt="{:.0%}"),
        bar_chart("Recall per release (answers equal to the expected answer)",
                  [(s.release, {"recall": (s.view.recall.accuracy, _recall_text(s.view))})
                   for s in rows if s.view.recall is not None], ["recall"], maximum=1.0, tick_fmt="{:.0%}"),
    ]
    return [c for c in charts if c is not None]


@dataclass
class _Recorded:
    """What the runs of the site's cells recorded, read in bulk once."""

    samples: dict[int, RunSamples]
    totals: dict[int, dict[str, float]]
    grades: dict[int, GradeDetail]
    recalls: dict[int, RecallCount]

    def view(self, cell: CellResult, axes: list[str]) -> CellView:
        run = cell.run_id
        if run is None:
            return cell_view(cell, axes, RunSamples(), {}, None, None)
        return cell_view(cell, axes, self.samples.get(run, RunSamples()), self.totals.get(run, {}),
                         self.grades.get(run), self.recalls.get(run))


def _shape_json(knobs: dict[str, Any]) -> str:
    """What names a shape: its knobs, a knob at None (unset) and one not recorded alike."""
    return json.dumps({n: v for n, v in knobs.items() if v is not None}, sort_keys=True)


def _stack(key: str, members: list[CellResult], workload: str, recorded: _Recorded,
           defaults: dict[str, Any] | None) -> Stack:
    """One engine kind, model and workload: its releases, and a shape per knob set."""
    c0 = members[0]
    engine = "vllm-cpu" if c0.accelerator == "cpu" else "vllm"
    engine += (f" +{c0.patches}" if c0.patches else "") + (f" +lmcache {c0.lmcache}" if c0.lmcache else "")
    stack = Stack(key, f"{engine} · {c0.model_name} · workload {workload}")
    stack.releases = sorted({c.vllm_version for c in members}, key=Version, reverse=True)
    # The cells of one stack need not record the same knob names: a knob added later is
    # left out of a cell while unset (the spec's Knobs.canonical keeps old cells' ids), so
    # one recorded before it existed, or without it, lacks it. Every name any member
    # records, read as None (unset) where a member lacks it, in first-seen order.
    names = list(dict.fromkeys(n for c in members for n in c.knobs))
    order = {n: i for i, n in enumerate(names)}
    c0_knobs = {n: c0.knobs.get(n) for n in names}
    axes = varying_knobs(members)
    stack.shared = _knobs_text(c0_knobs, [n for n in _set(c0_knobs, defaults) if n not in axes])
    shapes: dict[str, Shape] = {}
    for c in members:
        knobs_json = _shape_json(c.knobs)
        if knobs_json not in shapes:
            knobs = {n: c.knobs.get(n) for n in names}
            named = sorted(set(_set(knobs, defaults)) | set(axes), key=order.__getitem__)
            shapes[knobs_json] = Shape(_key(key, knobs_json), stack, _knobs_text(knobs, axes),
                                       _knobs_text(knobs, named), c.control_id is None)
        shapes[knobs_json].slots[c.vllm_version] = Slot(c.vllm_version, recorded.view(c, axes))
    stack.shapes = sorted(shapes.values(), key=lambda s: (not s.control, s.label))
    return stack


def _mark_changes(shape: Shape, records: list[BisectRecord]) -> None:
    """Each release whose result differs from the release below it (with a result), and the
    bisects recorded between those two cells."""
    below: Slot | None = None
    for slot in reversed(shape.rows()):  # oldest first
        if slot.view.cell.run_id is None:
            continue
        if below is not None and below.result != slot.result:
            slot.previous = below.release
            slot.change = direction(below.result, slot.result) or "changed"
            slot.bisects = [r for r in records if r.new_cell_id == slot.view.cell.cell_id
                            and r.old_cell_id == below.view.cell.cell_id]
        below = slot


def build_site(store: Store, defaults: dict[str, Any] | None = None) -> Site:
    """Everything the pages show. ``defaults``: the knobs' default values (the matrix spec's,
    which this layer does not know), so a cell is named by the knobs it sets."""
    cells = [c for c in cell_results(store) if _release(c.vllm_version) is not None]
    run_ids = [c.run_id for c in cells if c.run_id is not None]
    recorded = _Recorded(load_samples(store, run_ids), metric_totals_for(store, run_ids),
                         latest_grades_for(store, run_ids), recall_counts(store, run_ids))
    workloads = _workloads(store)
    grouped: dict[str, list[CellResult]] = defaultdict(list)
    for c in cells:
        grouped[_key(c.accelerator, c.patches, c.lmcache, c.model_digest, c.workload_digest)].append(c)
    stacks = sorted((_stack(key, members, workloads.get(members[0].cell_id, "?"), recorded, defaults)
                     for key, members in grouped.items()), key=lambda s: s.title)
    records = store.bisects()
    shape_of: dict[str, Shape] = {}
    counts: dict[str, int] = defaultdict(int)
    for shape in (shape for stack in stacks for shape in stack.shapes):
        _mark_changes(shape, records)
        shape.charts = _charts(shape)
        for slot in shape.rows():
            shape_of[slot.view.cell.cell_id] = shape
            counts[slot.result] += 1
            if slot.result not in {*UNREMARKABLE, "not run"}:
                run = slot.view.cell.run_id
                shape.evidence.append(_evidence(store, slot, recorded.grades.get(run) if run else None))
    pages = [BisectPage(r, shape_of.get(r.old_cell_id or ""), shape_of.get(r.new_cell_id or ""), *_range_link(r))
             for r in records]
    with store.reader() as rc:
        newest = rc.rows("SELECT max(finished_at) FROM runs")[0][0]
    return Site(stacks, pages, dict(sorted(counts.items())), newest)


def _write(path: Path, text: str) -> bool:
    """Write ``text`` unless the file holds it already; whether it was written."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


@dataclass(frozen=True)
class Published:
    pages: int
    written: list[Path]  # pages whose content changed (all of them the first time)


def publish(store: Store, out: Path, defaults: dict[str, Any] | None = None) -> Published:
    """Write the site of ``store`` into ``out``; files whose content is unchanged are left alone."""
    site = build_site(store, defaults)
    env = environment()
    env.filters["shell"] = shlex.join  # a command as a person pastes it
    files: dict[Path, str] = {
        out / STYLESHEET: env.get_template("site.css").render(site=site),
        out / "index.html": env.get_template("site-index.html.j2").render(site=site, up=""),
    }
    for stack in site.stacks:
        for shape in stack.shapes:
            files[out / "cells" / f"{shape.key}.html"] = env.get_template("site-cell.html.j2").render(
                site=site, shape=shape, up="../")
    for page in site.bisects:
        files[out / "bisects" / f"{page.record.id}.html"] = env.get_template("site-bisect.html.j2").render(
            site=site, page=page, up="../")
    written = [path for path, text in files.items() if _write(path, text)]
    return Published(len(files), written)
