"""`vmatrix shrink CELL`: the smallest part of a corrupt cell's workload that still fails.

Delta debugging (Zeller's ddmin, orchestrator/shrink/ddmin.py) over the requests a recorded
run of the cell sent, level by level from coarse to fine units (groups of phases, sessions,
single requests: orchestrator/shrink/units.py). Each probe is a real engine run of the cell
and its control on the kept requests (orchestrator/shrink/probe.py), recorded and graded as
cells are; a probe fails when ``k`` of up to ``n`` runs of it grade ``corrupt``. The answer
is a matrix file whose one workload is the kept requests (a trace beside it), expanding to
the probe cell that last failed, and a row in ``shrinks``.

Races are not deterministic, so what "still fails" means is the user's ``k`` of ``n``; a
probe that passes may be unlucky. A probe budget (``max_probes``) ends the search early
with what has been shown to fail so far (status ``stopped``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vmatrix.db.queries import sweep_info
from vmatrix.db.records import ShrinkRecord
from vmatrix.db.store import Store
from vmatrix.errors import InputError, SpecError
from vmatrix.orchestrator.plan.canary import is_canary
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.recorded import Recorded, load_recorded
from vmatrix.orchestrator.runtimes.interface import Runtime
from vmatrix.orchestrator.shrink.ddmin import ddmin
from vmatrix.orchestrator.shrink.probe import PREDICATE, Prober, ProbeResult, wrong_keys
from vmatrix.orchestrator.shrink.units import LEVELS, Unit, units
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.orchestrator.spec.matrix_file import MatrixSpec, Timeouts, load_spec, parse_spec
from vmatrix.orchestrator.spec.workload import Grading
from vmatrix.progress import StepReport

__all__ = ["LEVELS", "ShrinkError", "shrink"]


class ShrinkError(InputError):
    """A cell that cannot be shrunk (not corrupt, a workload a trace cannot hold ...)."""


class _Budget(Exception):
    """The probe budget is spent."""


@dataclass(frozen=True)
class Settings:
    k: int = 2
    n: int = 3
    levels: tuple[str, ...] = LEVELS
    max_probes: int | None = None


def _original_spec(store: Store, recorded: Recorded) -> MatrixSpec | None:
    """The matrix the recorded run's sweep ran (its grading, timeouts, resources); None if unreadable."""
    sweep_id = store.run(recorded.run_id).sweep_id
    try:
        return parse_spec(sweep_info(store, sweep_id).spec_text, f"sweep {sweep_id}")
    except (SpecError, ValueError):
        return None


def shrink(store: Store, cell_ref: str, settings: Settings, out: Path, work: Path, runtime: Runtime | None = None,
           say: Callable[[str], None] | None = None, progress: StepReport | None = None,
           on_probe: Callable[[ProbeResult, int], None] | None = None) -> ShrinkRecord:
    """Shrink the cell ``cell_ref`` names; write the minimal workload's matrix to ``out`` (its
    trace beside it) and record the answer. ``work``: probe traces and engine logs.
    ``on_probe(result, kept)``: after each probe, with the requests of the smallest failing
    probe so far (the recorded workload's before one fails)."""
    started = time.monotonic()
    k, n = settings.k, settings.n
    if not 1 <= k <= n:
        raise ShrinkError.naming(f"{{k}} {k}: between 1 and {{n}} ({n})")
    recorded = load_recorded(store, cell_ref)
    cell = recorded.cell
    if recorded.verdict != "corrupt":
        raise ShrinkError(f"cell {cell.id}: its run {recorded.run_id} is {recorded.verdict or 'not graded'}, "
                          "not corrupt: nothing to shrink")
    original = _original_spec(store, recorded)
    grading = original.grading if original else Grading()
    timeouts = original.timeouts if original else Timeouts()
    sweep_id = store.create_sweep(f"shrink {cell.id}", "<vmatrix shrink>", f"shrink of cell {cell.id}, k={k} n={n}")
    prober = Prober(store, recorded, sweep_id, k, n, grading, timeouts, work / "traces", work / "logs", runtime, say,
                    progress)
    all_keys = [r.key for r in recorded.workload.requests]
    keep = list(all_keys)
    probes: list[ProbeResult] = []
    last_fail: ProbeResult | None = None
    # Where the search looks first: the requests the recorded run got wrong, then the last failing probe's.
    diverged = wrong_keys(recorded.evidence)
    passed: list[set[str]] = []  # the request keys of each probe that passed
    status, error = "done", None

    def fails(chosen: list[Unit], level: str) -> bool:
        nonlocal last_fail, diverged
        if settings.max_probes is not None and len(probes) >= settings.max_probes:
            raise _Budget
        wanted = set().union(*(u.keys for u in chosen))
        if any(wanted <= p for p in passed):
            # Monotone across levels too: part of a workload that passed is taken to pass
            # (a resend alone, once its session passed with its cold prompt).
            return False
        result = prober.probe([key for key in all_keys if key in wanted], level)
        probes.append(result)
        if not result.fails:
            passed.append(wanted)
        if result.fails and (last_fail is None or result.requests <= last_fail.requests):
            last_fail = result
            diverged = result.diverged or diverged
        if on_probe is not None:
            # What has been shown to fail so far: the smallest failing probe's requests.
            on_probe(result, last_fail.requests if last_fail is not None else len(keep))
        return result.fails

    try:
        for level in settings.levels:
            found = units(recorded.workload, level, keep)
            if len(found) < 2:
                continue
            if level == "groups":
                # Few coarse units (a race's repeats): each alone first, as a repeat often fails by itself.
                start = len(found) if len(found) <= 4 else 2
                kept_units = ddmin(found, lambda chosen, level=level: fails(chosen, level), start)
            else:
                kept_units = around(found, diverged, lambda chosen, level=level: fails(chosen, level))
            wanted = set().union(*(u.keys for u in kept_units))
            keep = [key for key in all_keys if key in wanted]
    except _Budget:
        status = "stopped"
    # What was shown to fail: the smallest failing probe (the whole recorded workload if none).
    if last_fail is not None:
        keep = _keys_of(prober, last_fail, all_keys)
    result_cell = last_fail.cell_id if last_fail else None
    matrix_text = _matrix(recorded, keep, out, original, prober) if last_fail else None
    record = ShrinkRecord(
        cell_id=cell.id, run_id=recorded.run_id, k=k, n=n, predicate=PREDICATE, levels=list(settings.levels),
        status=status, requests_before=len(all_keys), requests_after=len(keep), kept=keep,
        probes=[p.to_json() for p in probes], engine_runs=prober.engine_runs, reused_runs=prober.reused_runs,
        wall_s=time.monotonic() - started, result_cell_id=result_cell,
        matrix_path=str(out) if matrix_text else None, matrix_text=matrix_text, error=error)
    store.record_shrink(record)
    store.finish_sweep(sweep_id)
    return record


def around(found: list[Unit], diverged: set[str], fails: Callable[[list[Unit]], bool]) -> list[Unit]:
    """ddmin, better informed: the units holding a request that went wrong are kept (the
    failure was seen there), and ddmin removes what it can of the others; those units alone
    are tried first. Without such units, plain ddmin."""
    pinned = [u for u in found if u.keys & diverged]
    rest = [u for u in found if not u.keys & diverged]
    if not pinned or not rest:
        return ddmin(found, fails)
    if fails(pinned):
        return ddmin(pinned, fails) if len(pinned) > 1 else pinned
    kept = ddmin(rest, lambda chosen: fails(_in_order(found, pinned + chosen)))
    return _in_order(found, pinned + kept)


def _in_order(found: list[Unit], chosen: list[Unit]) -> list[Unit]:
    wanted = {id(u) for u in chosen}
    return [u for u in found if id(u) in wanted]


def _keys_of(prober: Prober, result: ProbeResult, all_keys: list[str]) -> list[str]:
    """The request keys of a probe's cell, read from its trace workload."""
    from vmatrix.jobs.traces import load_trace

    spec = prober.store.cell_spec(result.cell_id)
    assert spec is not None
    trace = load_trace(spec["workload"]["trace"])
    keys = {f"{sid}/{turn}" for phase in trace.schedule.phases for sid, turn in phase.requests}
    return [key for key in all_keys if key in keys]


def _knob_axes(recorded: Recorded) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Axes giving exactly the cell and its control, and the control rule."""
    cell, control = recorded.cell.knobs, recorded.control.knobs
    defaults = Knobs().canonical()
    axes: dict[str, list[Any]] = {}
    rule: dict[str, Any] = {}
    for name in sorted(set(cell) | set(control)):
        a, b = cell.get(name), control.get(name)
        if a != b:
            axes[name] = [b, a]
            rule[name] = b
        elif a != defaults.get(name) and a is not None:
            axes[name] = [a]
    return axes, rule


def _matrix(recorded: Recorded, keep: list[str], out: Path, original: MatrixSpec | None, prober: Prober) -> str:
    """The minimal workload as a matrix file (and its trace beside it); checked to expand to
    the probe cell that failed, so `vmatrix sweep run` on it finds the probe's runs."""
    cell = recorded.cell
    _, _, trace_text = prober.cells(keep)
    trace = out.with_suffix(".jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text(trace_text, encoding="utf-8")
    engine: dict[str, Any] = {"vllm": cell.engine.vllm, "accelerator": cell.engine.accelerator}
    if cell.engine.patches:
        engine["patches"] = cell.engine.patches
    if cell.engine.lmcache:
        engine["lmcache"] = cell.engine.lmcache
    name = cell.model.name
    model = {"canary": name.removeprefix("canary:")} if is_canary(name) else {"path": cell.model.path}
    axes, rule = _knob_axes(recorded)
    wl = recorded.workload
    matrix: dict[str, Any] = {
        "name": f"shrink-{cell.id[:12]}", "engines": [engine], "model": model, "axes": axes, "control": rule,
        "workloads": [{"name": wl.name, "kind": "trace", "trace": trace.name, "max_tokens": wl.max_tokens,
                       "top_logprobs": wl.top_logprobs, "api": wl.api}],
    }
    if original is not None:
        matrix["grading"] = original.grading.model_dump(mode="json")
        matrix["timeouts"] = original.timeouts.model_dump(mode="json")
        matrix["resources"] = original.resources.model_dump(mode="json")
    head = (f"# The smallest part of cell {cell.id}'s workload (run {recorded.run_id}) found by `vmatrix shrink`:\n"
            f"# {len(keep)} of {len(wl.requests)} requests, corrupt in at least {prober.k} of {prober.n} runs.\n"
            f"# Run it: vmatrix sweep run {out.name} (its cells are the shrink's last failing probe).\n")
    text = head + yaml.safe_dump(matrix, sort_keys=False, width=120)
    out.write_text(text)
    plan = expand(load_spec(out, check_index=False), str(out))
    probe_cell, _, _ = prober.cells(keep)
    if probe_cell.id not in {c.id for c in plan.cells}:
        raise ShrinkError(f"{out}: the matrix written does not expand to the probe cell {probe_cell.id}")
    return text
