"""Keep the lookup table current: run each new release, and bisect what changed.

One pass (:func:`watch_once`): resolve the matrix's release ranges against the index,
run the cells the results DB has no run of (a new release's; cells are content-addressed,
so a recorded release is never run again), then hold every cell against the same cell on
the previous release the DB has a verdict for, and bisect each one whose verdict
changed (``--find-fix`` when it got better; down to commits when the matrix names a
wheel source, ``bisect: {repo, wheel_url}``). Each bisect's answer is recorded beside
the two cells, so the next pass knows it; a pass with nothing new does nothing.

Every piece of state is in the results DB: a killed watch resumes where it stopped
(recorded cells are skipped, a bisect's finished steps are stored runs, a recorded
bisect is not run again).

What runs engines is handed in (:class:`Hooks`): the CLI runs sweeps and bisects with
its progress views; this module only decides what to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from vmatrix.cells import Cell, Direction, direction
from vmatrix.orchestrator.plan.matrix import Plan, describe_knobs, engine_recipes, expand
from vmatrix.orchestrator.plan.release_ranges import RangeChoice, load_matrix
from vmatrix.orchestrator.spec.engines import EngineSpec
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec

if TYPE_CHECKING:
    from vmatrix.db.records import BisectRecord
    from vmatrix.db.store import Store
    from vmatrix.orchestrator.bisect import BisectReport, BisectRequest, Step

@dataclass(frozen=True)
class Change:
    """A cell whose verdict differs from the same cell's on the previous recorded release."""

    cell: Cell  # on the newer release
    previous: Cell  # the same knobs, workload and model on the older one
    before: str
    after: str

    @property
    def direction(self) -> Direction | None:
        return direction(self.before, self.after)

    @property
    def find_fix(self) -> bool:
        return self.direction == "better"

    @property
    def predicate(self) -> str:
        # "Bad" is anything unlike the good end: a regression is bad where the verdict is
        # not the old one; a fix (--find-fix) is bad where it is not yet the new one.
        return f"verdict != {self.after if self.find_fix else self.before}"

    @property
    def ends(self) -> tuple[str, str]:
        """(good, bad) as `vmatrix bisect` takes them."""
        old, new = self.previous.engine.vllm, self.cell.engine.vllm
        return (new, old) if self.find_fix else (old, new)

    def line(self) -> str:
        arrow = {"better": "fixed", "worse": "regressed", "changed": "changed", None: "changed"}[self.direction]
        return (f"{self.cell.engine.distribution} {self.previous.engine.vllm} -> {self.cell.engine.vllm} "
                f"[{describe_knobs(self.cell.knobs)}]: {self.before} -> {self.after} ({arrow})")


@dataclass
class Hooks:
    """What the watch hands off: lines for the person, and the two things that run engines."""

    say: Callable[[str], None]
    # Runs the plan's cells not yet recorded, as sweep ``sweep_id`` (scheduler.run_sweep).
    sweep: Callable[[Plan, int], object]
    # Runs one bisect (orchestrator.bisect.run_bisect), telling ``on_step`` each step.
    bisect: Callable[[BisectRequest, MatrixSpec, Callable[[Step], None]], BisectReport]


@dataclass
class WatchReport:
    ranges: list[RangeChoice]
    releases: list[str]  # engine labels the matrix stands for today, oldest first
    new: list[str]  # those with cells the DB had no run of
    ran: int = 0  # cells run now
    sweep_id: int | None = None
    changes: list[Change] = field(default_factory=list)
    bisected: list[tuple[Change, int]] = field(default_factory=list)  # recorded now: (change, bisect id)
    known: int = 0  # changes bisected by an earlier pass
    unranked: list[Change] = field(default_factory=list)  # shown, not bisected

    @property
    def nothing_new(self) -> bool:
        return not self.new and not self.bisected

    def quiet_line(self) -> str:
        unranked = f", {len(self.unranked)} not rankable" if self.unranked else ""
        return (f"nothing new: {len(self.releases)} release(s) ({', '.join(self.releases)}) all recorded; "
                f"{len(self.changes)} verdict change(s) between releases, {self.known} bisected before{unranked}")


def _version(text: str) -> Version | None:
    try:
        v = Version(text)
    except InvalidVersion:
        return None
    return None if v.local else v  # a commit build (0.30.0+g0123abc) is a bisect step, not a release


def result_of(store: Store, cell_id: str) -> str | None:
    """A cell's newest verdict, or its newest run's status where it has no grade; None: never run."""
    run = store.latest_run(cell_id)
    if run is None:
        return None
    grade = store.latest_grade(run.id)
    return grade.verdict if grade else run.status


def previous_release(store: Store, cell: Cell) -> tuple[Cell, str] | None:
    """The same cell on the newest older vLLM release the DB has a result for, with that result.

    Same everything but the release: accelerator, patch set, LMCache, knobs, model and
    workload, so its id is the cell id that release would give (``Cell.make_id``)."""
    from vmatrix.db.queries import recorded_releases

    mine = _version(cell.engine.vllm)
    if mine is None:
        return None
    e = cell.engine
    texts = {v: text for text in recorded_releases(store, e.accelerator, e.patches, e.lmcache)
             if (v := _version(text)) is not None and v < mine}
    for v in sorted(texts, reverse=True):
        recipe = replace(e, vllm=texts[v])
        previous = replace(cell, engine=recipe, id=Cell.make_id(recipe, cell.knobs, cell.model.digest,
                                                                  cell.workload_digest))
        if (found := result_of(store, previous.id)) is not None:
            return previous, found
    return None


def find_changes(store: Store, cells: list[Cell]) -> list[Change]:
    """Every cell (with a result) whose verdict differs from its previous release's."""
    out = []
    for cell in cells:
        now = result_of(store, cell.id)
        if now is None:
            continue
        found = previous_release(store, cell)
        if found is not None and found[1] != now:
            out.append(Change(cell, found[0], found[1], now))
    return out


def selector_text(cell: Cell, cells: list[Cell]) -> str:
    """``cell`` as `vmatrix bisect --cell` names it among ``cells``: the knobs that tell them
    apart and those not at their defaults, in the selector grammar (vmatrix/selector.py).
    It is what the recorded bisect and its next, commit-level command say; the watch itself
    selects by every knob (``BisectRequest.filters``)."""
    import json

    from vmatrix.orchestrator.spec.knobs import Knobs

    defaults = Knobs().canonical()

    def varies(name: str) -> bool:
        return len({json.dumps(c.knobs.get(name), sort_keys=True) for c in cells}) > 1

    parts = []
    for name, value in cell.knobs.items():
        if value == defaults.get(name) and not varies(name):
            continue
        if name == "speculative":
            text = f"{value['method']}:{value['num_speculative_tokens']}" if value else "off"
        elif isinstance(value, bool):
            text = "on" if value else "off"
        elif isinstance(value, list):
            text = " ".join(map(str, value))
        else:
            text = "none" if value is None else str(value)
        parts.append(f"{name}={text}")
    if len({c.workload["name"] for c in cells}) > 1:
        parts.append(f"workload={cell.workload['name']}")
    return ",".join(parts)


def _engine_of(spec: MatrixSpec, cell: Cell) -> EngineSpec:
    """The matrix engine (one release) a cell was expanded from."""
    recipes = engine_recipes(spec)
    return next(e for e, r in zip(spec.engines, recipes, strict=True) if r == cell.engine)


def _failed(req: BisectRequest, change: Change, steps: list[Step], error: str, mode: str, wall_s: float,
            candidates: list[str]) -> BisectRecord:
    from vmatrix.db.records import BisectRecord
    from vmatrix.orchestrator.bisect.report import step_json

    return BisectRecord(mode=mode, distribution=change.cell.engine.distribution, good=req.good, bad=req.bad,
                        find_fix=req.find_fix, predicate=req.predicate, candidates=candidates,
                        steps=[step_json(s) for s in steps], source="watch", wall_s=wall_s,
                        old_cell_id=change.previous.id, new_cell_id=change.cell.id,
                        repo=str(req.repo) if req.repo else None, error=error)


def bisect_change(store: Store, path: Path, spec: MatrixSpec, change: Change, hooks: Hooks,
                  cells: list[Cell]) -> list[int]:
    """Bisect one change between its two releases, then down to commits when the matrix
    names a wheel source and the releases are adjacent; record each answer. Returns the
    recorded bisects' ids."""
    from vmatrix.orchestrator.bisect import BisectError, BisectRequest
    from vmatrix.orchestrator.bisect.report import to_record

    engine = _engine_of(spec, change.cell)
    one = spec.model_copy(update={"engines": [engine]})
    filters = {**change.cell.knobs, "workload": change.cell.workload["name"]}
    good, bad = change.ends
    same_engine = [c for c in cells if c.engine == change.cell.engine]
    req = BisectRequest(matrix=path, cell=selector_text(change.cell, same_engine), good=good, bad=bad,
                        predicate=change.predicate, find_fix=change.find_fix, filters=filters)
    recorded = []
    for mode in ("release", "commit"):
        steps: list[Step] = []
        t0 = time.monotonic()
        try:
            report = hooks.bisect(req, one, steps.append)
        except BisectError as exc:
            cands = sorted({s.candidate for s in steps}, key=lambda c: _version(c) or Version("0"))
            record = _failed(req, change, steps, str(exc), mode, time.monotonic() - t0, cands)
            recorded.append(store.record_bisect(record))
            hooks.say(f"bisect {recorded[-1]}: {change.line()}: could not answer: {exc}")
            return recorded
        record = to_record(report, req.good, req.bad, "watch", str(req.repo) if req.repo else None)
        # The cells of the change itself, whichever way round the search ran.
        record = replace(record, old_cell_id=change.previous.id, new_cell_id=change.cell.id)
        recorded.append(store.record_bisect(record))
        hooks.say(f"bisect {recorded[-1]}: {change.line()}: {report.found}")
        result = report.result
        adjacent = not result.untested and (result.candidates.index(result.first_new)
                                            - result.candidates.index(result.last_old) == 1)
        if mode == "commit" or spec.bisect is None or not adjacent:
            break
        old, new = f"v{result.last_old}", f"v{result.first_new}"
        req = replace(req, good=new if req.find_fix else old, bad=old if req.find_fix else new,
                      repo=Path(spec.bisect.repo).expanduser(), wheel_url=spec.bisect.wheel_url)
    return recorded


def watch_once(path: Path, store: Store, hooks: Hooks, index_url: str | None = None) -> WatchReport:
    """One pass over the matrix at ``path``: run what is new, bisect what changed."""
    resolved = load_matrix(path, index_url)
    plan = expand(resolved.spec, str(path))
    order = {r.label: i for i, r in enumerate(engine_recipes(resolved.spec))}
    labels = sorted({c.engine.label for c in plan.cells}, key=order.__getitem__)
    todo = [c for c in plan.cells if store.latest_run(c.id) is None]
    new = sorted({c.engine.label for c in todo}, key=order.__getitem__)
    report = WatchReport(resolved.ranges, labels, new)
    if todo:
        for choice in resolved.ranges:
            hooks.say(choice.line())
        hooks.say(f"new: {', '.join(new)} ({len(todo)} cell(s) without a run)")
        report.sweep_id = store.create_sweep(f"watch:{plan.spec.name}", str(path), path.read_text())
        hooks.sweep(plan.only_engines(new), report.sweep_id)
        report.ran = sum(1 for c in todo if store.latest_run(c.id) is not None)
    report.changes = find_changes(store, plan.cells)
    for change in report.changes:
        if store.bisects(change.previous.id, change.cell.id):
            report.known += 1
        elif change.direction is None:
            report.unranked.append(change)
        else:
            report.bisected += [(change, i) for i in bisect_change(store, path, resolved.spec, change, hooks,
                                                                   plan.cells)]
    return report
