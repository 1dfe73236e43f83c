"""Running steps as sweeps: a step is an ordinary cell run, observed from its stored result.

For a candidate engine version the matrix is narrowed to one engine of that version and
to the one selected cell (plus the control it is graded against), and
:func:`orchestrator.sweep.scheduler.run_sweep` runs it. So every step is recorded in the
results database like any sweep cell, and because ``run_sweep`` skips cells that
already have a result, re-running a bisect (after an interrupt, or with another
predicate) and later sweeps reuse those steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from vmatrix.cells import Cell
from vmatrix.orchestrator.bisect.errors import BisectError
from vmatrix.orchestrator.bisect.predicate import Observation
from vmatrix.orchestrator.spec.engines import EngineSpec
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec
from vmatrix.recipe import EngineRecipe


def request_metrics(requests: Iterable[Any]) -> dict[str, float]:
    """Medians over the run's successful requests: decode tokens/s per request, TTFT, e2e.

    decode tokens/s = (generated tokens - 1) / (e2e - ttft): the first token belongs to
    prefill, so it is left out of the decode rate.
    """
    decode, ttft, e2e = [], [], []
    for r in requests:
        if r.error:
            continue
        if r.ttft_s is not None:
            ttft.append(r.ttft_s)
        if r.e2e_s is not None:
            e2e.append(r.e2e_s)
        if r.ttft_s is not None and r.e2e_s is not None and len(r.token_ids) > 1 and r.e2e_s > r.ttft_s:
            decode.append((len(r.token_ids) - 1) / (r.e2e_s - r.ttft_s))
    out = {}
    for name, values in (("decode_tps", decode), ("ttft_s", ttft), ("e2e_s", e2e)):
        if values:
            out[name] = statistics.median(values)
    return out



Phase = Callable[[str], None]


class SweepEvaluator:
    """Evaluates candidates by running the selected cell (and its control) with run_sweep.

    ``cells_for(candidate)`` gives the (cell, control) pair; cells already recorded are
    skipped by run_sweep, which is what makes a bisect resumable. Background venv
    builds (``prefetch``) go through ``ensure_env``, whose file lock makes the step that
    later needs the same venv wait for that build instead of starting another.
    """

    def __init__(
        self,
        spec: MatrixSpec,
        engine: EngineSpec,
        cells_for: Callable[[str], tuple[Cell, Cell | None]],
        store: Any,
        log_dir: Path,
        *,
        source: str,
        address: str | None = None,
        on_phase: Phase | None = None,
        run_sweep: Callable[..., Any] | None = None,
        ensure_env: Callable[..., Any] | None = None,
    ) -> None:
        from vmatrix.orchestrator.runtimes import venvs
        from vmatrix.orchestrator.sweep import scheduler

        self.spec = spec
        self.engine = engine
        self.cells_for = cells_for
        self.store = store
        self.log_dir = log_dir
        self.source = source
        self.address = address
        self.on_phase = on_phase or (lambda text: None)
        self._run_sweep = run_sweep or scheduler.run_sweep
        self._ensure_env = ensure_env or venvs.ensure_env
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bisect-prefetch")
        self._prefetching: dict[str, Future[Any]] = {}

    def ready(self, candidate: str) -> bool:
        """Whether the candidate's engine venv is already built (no install needed)."""
        from vmatrix.orchestrator.runtimes.venvs import env_ready

        try:
            return env_ready(self.cells_for(candidate)[0].engine)
        except BisectError:
            return False

    def prefetch(self, candidates: list[str]) -> None:
        """Build these candidates' venvs in background threads while a step runs."""
        for cand in candidates:
            if cand in self._prefetching or self.ready(cand):
                continue
            try:
                recipe = self.cells_for(cand)[0].engine
            except BisectError:
                continue
            log = self.log_dir / f"env-{recipe.env_id}.log"
            self._prefetching[cand] = self._pool.submit(self._quiet_build, recipe, log)

    def _quiet_build(self, recipe: EngineRecipe, log: Path) -> None:
        # A failed build is remembered by ensure_env; the step itself then reports it.
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._ensure_env(recipe, log)
        except Exception:  # noqa: BLE001, S110 - reported by the step that needs this venv
            pass

    def close(self) -> None:
        # Running builds finish (a half-built venv would be rebuilt anyway); queued ones are dropped.
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __call__(self, candidates: list[str]) -> list[Observation]:
        from vmatrix.orchestrator.plan.matrix import Plan
        from vmatrix.orchestrator.sweep.scheduler import SweepError

        pairs = {cand: self.cells_for(cand) for cand in candidates}
        controls = [ctl for _, ctl in pairs.values() if ctl is not None]
        cells = list({c.id: c for c in [*controls, *(cell for cell, _ in pairs.values())]}.values())
        roles = {cell.id: (cand, "cell") for cand, (cell, _) in pairs.items()}
        roles.update({ctl.id: (cand, "control") for cand, (_, ctl) in pairs.items() if ctl is not None})
        # What this step ran, as a matrix: recorded with the sweep (commit mode puts the hash in `vllm`).
        step_spec = self.spec.model_copy(
            update={"engines": [self.engine.model_copy(update={"vllm": c}) for c in candidates]})
        text = yaml.safe_dump(step_spec.model_dump(mode="json"), sort_keys=False)
        sweep_id = self.store.create_sweep(f"bisect:{self.spec.name}", self.source, text)

        def listen(cell_id: str, phase: str) -> None:
            cand, role = roles.get(cell_id, ("?", "cell"))
            self.on_phase(f"{cand} {role}: {phase}")

        error: str | None = None
        try:
            result = self._run_sweep(Plan(spec=step_spec, cells=cells), self.store, sweep_id, self.log_dir,
                                     address=self.address, listener=listen)
            skipped = set(result.skipped)
        except SweepError as exc:
            error, skipped = str(exc), set()
        out = []
        for cand, (cell, _) in pairs.items():
            run = self.store.latest_run(cell.id)
            if run is None:
                out.append(Observation(cand, unavailable=error or "no run was recorded"))
                continue
            grade = self.store.latest_grade(run.id)
            total = (run.timings or {}).get("total_s", run.finished_at - run.started_at)
            metrics = request_metrics(self.store.requests_for(run.id)) if run.status == "ok" else {}
            never_ready = run.status == "timeout" and (run.message or "").startswith("engine not ready")
            out.append(Observation(cand, run.status, grade.verdict if grade else None, run.signature, run.id,
                                   total, cell.id in skipped, metrics, never_ready=never_ready))
        return out

