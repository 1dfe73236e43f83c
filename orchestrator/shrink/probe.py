"""One probe of a shrink: a kept set of requests, run on the cell's engine and its control's.

A probe is a cell like any other: the recorded cell's engine, knobs and model with a trace
workload holding exactly the kept requests (orchestrator/shrink/units.py), its id the
content hash of those (``Cell.make_id``), its control likewise. Runs are recorded and graded
as a sweep's are (``run_cell``, ``Store.record_run``, ``grading.grade_cell``), so a probe's
evidence is read with `vmatrix results show`, and a shrink run again reads back the runs a
probe already has instead of starting engines.

Cost: a probe runs the control once (a control already recorded for the same requests is
read back), then the cell until ``k`` runs failed or ``k`` can no longer be reached of ``n``:
with the default 2 of 3, two runs decide most probes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vmatrix.cells import Cell, ModelRef, digest
from vmatrix.db.store import Store
from vmatrix.errors import NotFoundError
from vmatrix.jobs.traces import dump_trace
from vmatrix.jobs.workload import workload_digest
from vmatrix.orchestrator.plan.canary import canary_dir, canary_recipe, is_canary
from vmatrix.orchestrator.recorded import Recorded
from vmatrix.orchestrator.runtimes.interface import Runtime
from vmatrix.orchestrator.shrink.units import as_trace, subset
from vmatrix.orchestrator.spec.matrix_file import Timeouts
from vmatrix.orchestrator.spec.workload import Grading, WorkloadSpec
from vmatrix.orchestrator.sweep.grading import grade_and_record
from vmatrix.orchestrator.sweep.run_cell import run_cell
from vmatrix.progress import StepReport

PREDICATE = "verdict == corrupt"


@dataclass
class ProbeResult:
    level: str
    cell_id: str
    control_id: str
    requests: int
    verdicts: list[str] = field(default_factory=list)  # the cell's runs counted, in order
    fails: bool = False
    reused: int = 0  # recorded runs read back (the control's included)
    ran: int = 0  # engine runs started for this probe (the control's included)
    # Requests that went wrong (divergent or missing) in its corrupt runs: where the search looks first.
    diverged: set[str] = field(default_factory=set)

    @property
    def failures(self) -> int:
        return sum(v == "corrupt" for v in self.verdicts)

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "cell_id": self.cell_id, "control_id": self.control_id, "requests": self.requests,
                "verdicts": self.verdicts, "failures": self.failures, "fails": self.fails, "reused": self.reused,
                "ran": self.ran, "diverged": sorted(self.diverged)}


def served_model(cell: Cell) -> ModelRef:
    """The cell's model as this machine serves it: a canary from its folder here (the same
    recipe, or the probes would test another model), another model at its recorded path."""
    model = cell.model
    if is_canary(model.name):
        name = model.name.removeprefix("canary:")
        if digest(canary_recipe(name)) != model.digest:
            raise NotFoundError(f"cell {cell.id}: the canary {name} here is not the recorded one (its recipe changed)")
        return ModelRef(str(canary_dir(name)), model.digest, model.name)
    if not (Path(model.path) / "config.json").is_file():
        raise NotFoundError(f"cell {cell.id}: its model folder {model.path} is not on this machine")
    return model


Say = Callable[[str], None]


def wrong_keys(evidence: dict) -> set[str]:
    """The requests a grade found wrong at a clear margin or unanswered (its ``divergent`` list)."""
    return {d["key"] for d in evidence.get("divergent") or () if isinstance(d, dict) and "key" in d}


class Prober:
    """Runs probes of one recorded cell's workload; ``sweep_id`` is the sweep the shrink's
    runs are recorded under."""

    def __init__(self, store: Store, recorded: Recorded, sweep_id: int, k: int, n: int, grading: Grading,
                 timeouts: Timeouts, traces: Path, logs: Path, runtime: Runtime | None = None,
                 say: Say | None = None, progress: StepReport | None = None) -> None:
        self.store, self.recorded, self.sweep_id = store, recorded, sweep_id
        self.k, self.n, self.grading, self.timeouts = k, n, grading, timeouts
        self.traces, self.logs, self.runtime = traces, logs, runtime
        self.say = say or (lambda text: None)
        self.progress = progress
        self.model = served_model(recorded.cell)
        self.engine_runs = 0
        self.reused_runs = 0

    def cells(self, keep: Iterable[str]) -> tuple[Cell, Cell, str]:
        """The probe's cell and control for the requests ``keep``, and its trace's text."""
        wl = subset(self.recorded.workload, keep)
        text = dump_trace(as_trace(wl))
        self.traces.mkdir(parents=True, exist_ok=True)
        path = self.traces / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
        if not path.is_file():
            path.write_text(text, encoding="utf-8")
        spec = WorkloadSpec(name=wl.name, kind="trace", trace=str(path), max_tokens=wl.max_tokens,
                            top_logprobs=wl.top_logprobs, api=wl.api)
        wl_digest = workload_digest(spec)
        made = []
        for base, control_id in ((self.recorded.control, None), (self.recorded.cell, "")):
            cell_id = Cell.make_id(base.engine, base.knobs, self.model.digest, wl_digest)
            made.append(Cell(cell_id, base.engine, base.knobs, self.model, spec.model_dump(mode="json"), wl_digest,
                             made[0].id if control_id is not None else None, base.resources))
        control, cell = made
        return cell, control, text

    def _run(self, cell: Cell, label: str) -> tuple[str, set[str]]:
        """One engine run of ``cell``, recorded and graded; its verdict and wrong requests."""
        self.say(f"{label}: starting the engine")
        outcome = run_cell(cell, self.logs, self.timeouts, report=lambda _cell, phase: self.say(f"{label}: {phase}"),
                           runtime=self.runtime, progress=self.progress)
        self.engine_runs += 1
        run_id = self.store.record_run(self.sweep_id, outcome)
        grade = grade_and_record(self.store, cell, run_id, outcome, self.grading, self.sweep_id)
        return grade.verdict, wrong_keys(grade.evidence)

    def _recorded_verdicts(self, cell_id: str) -> list[tuple[str, set[str]]]:
        """The verdicts and wrong requests of the cell's recorded runs, oldest first (each
        run's newest grade)."""
        runs = sorted(self.store.ok_runs(cell_id, limit=1000), key=lambda r: r.id)
        out = []
        for run in runs:
            grade = self.store.latest_grade(run.id)
            if grade is not None and grade.verdict not in ("ungraded",):
                out.append((grade.verdict, wrong_keys(grade.evidence)))
        return out

    def probe(self, keep: Iterable[str], level: str) -> ProbeResult:
        keep = list(keep)
        cell, control, _ = self.cells(keep)
        self.store.add_cell(self.sweep_id, control)
        self.store.add_cell(self.sweep_id, cell)
        result = ProbeResult(level, cell.id, control.id, len(keep))
        if self.store.ok_runs(control.id, limit=1):
            result.reused += 1
        else:
            verdict, _ = self._run(control, f"probe {cell.id[:8]} control")
            result.ran += 1
            if verdict != "control":
                raise NotFoundError(f"probe {cell.id}: its control did not run ({verdict}); see `vmatrix results "
                                    f"show {control.id[:12]}`")
        recorded = self._recorded_verdicts(cell.id)[:self.n]
        result.reused += len(recorded)
        for verdict, wrong in recorded:
            result.verdicts.append(verdict)
            result.diverged |= wrong if verdict == "corrupt" else set()
        while result.failures < self.k and result.failures + (self.n - len(result.verdicts)) >= self.k:
            verdict, wrong = self._run(cell, f"probe {cell.id[:8]} run {len(result.verdicts) + 1}/{self.n}")
            result.verdicts.append(verdict)
            result.diverged |= wrong if verdict == "corrupt" else set()
            result.ran += 1
        result.fails = result.failures >= self.k
        self.reused_runs += result.reused
        return result
