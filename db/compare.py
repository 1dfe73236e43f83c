"""Candidate/baseline comparisons of recorded runs: which cells pair up, and by how much
one side is faster, with bootstrap confidence intervals over requests.

Everything but :func:`load_samples` and :func:`compare_groups` is pure (request samples,
metric totals and cell rows in, dataclasses out), so it is unit-tested without a database
or an engine.

The statistics (bootstrap intervals of ratios, and why they are these) are
:mod:`db.statistics`; which requests of two runs pair up, :mod:`db.matching`; this
module chooses what they are computed over.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vmatrix.db.counters import Rates, rates
from vmatrix.db.matching import matched, stacked  # noqa: F401 - matched re-exported
from vmatrix.db.reads import CellResult, Readable, cell_results, comparison_rows, sample_rows
from vmatrix.db.samples import (  # noqa: F401 - decode_tps re-exported
    PackedSamples,
    RunSamples,
    SamplesDecoder,
    counter_totals,
    decode_tps,
)
from vmatrix.db.statistics import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    Interval,
    draw_ahead,
    ratio_intervals,
)
from vmatrix.db.table import knob_text
from vmatrix.errors import InputError
from vmatrix.selector import normal, split

# This module imports no SQLAlchemy: `results compare` reads through db/reads.py.


T = TypeVar("T")

# Axes that are not knobs; ``vllm`` is the release alone, ``engine`` the whole label.
ENGINE_KEYS = ("engine", "vllm", "model")


# --- per-request samples ------------------------------------------------------------


def load_samples(source: Readable, run_ids: Iterable[int]) -> dict[int, RunSamples]:
    """Per run, the samples of its requests in recorded order, read in bulk.

    Equal to ``RunSamples.from_records(store.requests_for(run))`` (the tests hold them to
    it), but read from the run's one ``run_samples`` row (``db/samples.py``) instead of
    its request rows: comparing two large groups would otherwise read every wide request
    row of both. Runs without requests are absent.
    """
    decoder = SamplesDecoder()
    return {run_id: decoder.samples(*row) for run_id, row in sample_rows(source, run_ids).items()}


def load_packed_samples(source: Readable, run_ids: Iterable[int]) -> dict[int, PackedSamples]:
    """As :func:`load_samples`, left as stored: :func:`matched` decodes only what it must."""
    return {run_id: PackedSamples(*row) for run_id, row in sample_rows(source, run_ids).items()}


def prompt_type(phase: str) -> str:
    """``turn-2`` -> ``turn``, ``switch-0`` -> ``switch``: phases of one kind share a prefix."""
    head, sep, tail = phase.rpartition("-")
    return head if sep and tail.isdigit() else phase


def mean_present(values: Iterable[float | None]) -> float | None:
    """Mean of the values that were measured; None if none was."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def decode_by_prompt_type(samples: RunSamples) -> dict[str, float | None]:
    """Mean decode tokens/s per prompt type, in the order the types were first replayed."""
    groups: dict[str, list[float | None]] = defaultdict(list)
    for phase, value in zip(samples.phases, samples.decode_tps):
        groups[prompt_type(phase)].append(value)
    return {kind: mean_present(values) for kind, values in groups.items()}


def ttft_cold_hot(samples: RunSamples) -> tuple[float | None, float | None]:
    """Mean TTFT of the first phase (nothing cached yet) and of every later phase."""
    if not samples.phases:
        return None, None
    first = samples.phases[0]
    cold = [t for p, t in zip(samples.phases, samples.ttft_s) if p == first]
    hot = [t for p, t in zip(samples.phases, samples.ttft_s) if p != first]
    return mean_present(cold), mean_present(hot)


metric_totals = counter_totals  # the name this module's callers know


# --- cell selection and pairing -----------------------------------------------------


@dataclass(frozen=True)
class CellFilter:
    """``key=value`` on the command line: ``engine``, ``vllm``, ``model`` or a knob name."""

    key: str
    value: str

    @classmethod
    def parse(cls, text: str, field: str = "baseline") -> list[CellFilter]:
        """``prefix_caching=on,speculative=mtp:2`` (the grammar of :mod:`vmatrix.selector`)."""
        return [cls(key, value) for key, value in split(text, field)]

    def matches(self, cell: CellResult) -> bool:
        if self.key == "engine":  # a label, or just the release as in a matrix's include/exclude
            return self.value in (cell.engine, cell.vllm_version)
        if self.key == "vllm":
            return self.value == cell.vllm_version
        if self.key == "model":
            return self.value == cell.model_name
        # A knob a cell does not set is at its engine default, which the table shows as off.
        have, want = normal(knob_text(cell.knobs.get(self.key))), normal(self.value)
        # `speculative=dflash:4` names every drafter of that method and k; a drafter's name narrows it.
        return have == want or (self.key == "speculative" and have.startswith(want + " "))

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


_KEY_TEXT = json.JSONEncoder(sort_keys=True, default=str)  # json.dumps builds one per call


class _KnobKeys:
    """The knobs part of pair keys: the knobs not compared, as sorted JSON text (which
    tells apart exactly what the stored JSON does: 1, 1.0 and true are three values).

    Worked out once per knobs dict, not once per cell: cells with the same knobs text
    share one dict (``db.reads.cell_results``) and the cells list keeps them alive, so
    an id names one dict. Half the work of a json.dumps per cell, and str keys cache
    their hash for the lookups that follow.
    """

    def __init__(self, keys: set[str]) -> None:
        self.keys = keys
        self.by_dict: dict[int, str] = {}

    def __call__(self, knobs: dict[str, Any]) -> str:
        found = self.by_dict.get(id(knobs))
        if found is None:
            rest = {k: v for k, v in knobs.items() if k not in self.keys}
            found = self.by_dict[id(knobs)] = _KEY_TEXT.encode(rest)
        return found


def _pair_key(cell: CellResult, keys: set[str], knob_key: _KnobKeys) -> tuple[Any, ...]:
    """What must agree for two cells to be a pair: everything the filters do not name."""
    if "engine" in keys:
        engine: Any = None
    elif "vllm" in keys:  # other releases: same distribution and add-ons
        engine = (cell.accelerator, cell.patches, cell.lmcache)
    else:
        engine = cell.engine
    model = None if "model" in keys else cell.model_digest
    return engine, model, cell.workload_digest, knob_key(cell.knobs)


@dataclass
class Pairing:
    pairs: list[tuple[CellResult, CellResult]] = field(default_factory=list)
    unpaired_baseline: list[CellResult] = field(default_factory=list)
    unpaired_candidate: list[CellResult] = field(default_factory=list)


def pair_cells(cells: Sequence[CellResult], baseline: Sequence[CellFilter],
               candidate: Sequence[CellFilter]) -> Pairing:
    """Pair each baseline cell with the candidate cell that agrees on every other knob.

    Both sides must name the same keys: those are the axis being compared, and all
    other axes are held equal. Should a side have several cells for one pair key (a
    patch set edited between sweeps keeps its label), the newest created wins and the
    others are reported unpaired.
    """
    keys = {f.key for f in baseline}
    if not baseline or keys != {f.key for f in candidate}:
        raise InputError.naming("{baseline} and {candidate} must name the same keys (the axis being compared)")
    # An unset knob reads as "off", so a misspelt knob would silently match: refuse it.
    known = {k for cell in cells for k in cell.knobs} | set(ENGINE_KEYS)
    if unknown := sorted(keys - known):
        raise InputError(f"unknown key(s) {', '.join(unknown)}; use one of {', '.join(sorted(known))}")
    result = Pairing()
    base: dict[Any, CellResult] = {}
    cand: dict[Any, CellResult] = {}
    knob_key = _KnobKeys(keys)
    for cell in cells:  # in creation order, so later cells replace earlier ones
        in_base = all(f.matches(cell) for f in baseline)
        in_cand = all(f.matches(cell) for f in candidate)
        if in_base and in_cand:
            raise InputError("cell {id} matches both {baseline} and {candidate}", id=cell.cell_id)
        if in_base:
            side, losers = base, result.unpaired_baseline
        elif in_cand:
            side, losers = cand, result.unpaired_candidate
        else:
            continue
        previous = side.get(key := _pair_key(cell, keys, knob_key))
        if previous is not None:
            losers.append(previous)
        side[key] = cell
    result.pairs = [(cell, cand[key]) for key, cell in base.items() if key in cand]
    result.unpaired_baseline += [cell for key, cell in base.items() if key not in cand]
    result.unpaired_candidate += [cell for key, cell in cand.items() if key not in base]
    return result


# --- the comparison -----------------------------------------------------------------


@dataclass(slots=True)
class Side:
    """One cell of a pair with what its latest run recorded. Read-only by convention, not
    frozen, as db.reads.CellResult: a comparison builds one per cell, and a frozen
    dataclass's ``__init__`` costs ~5x a plain one's (~7 ms on 10,000 cells)."""

    cell_id: str
    engine: str
    knobs: dict[str, Any]
    run_id: int | None
    result: str  # verdict, or status when ungraded, or "not run"
    samples: RunSamples | PackedSamples
    totals: Mapping[str, float]


@dataclass(frozen=True)
class PairResult:
    label: str  # the knobs the pair shares that vary across the comparison
    baseline_cell: str
    candidate_cell: str
    baseline_result: str
    candidate_result: str
    ttft: Interval
    decode: Interval
    baseline_rates: Rates
    candidate_rates: Rates

    @property
    def result_changed(self) -> bool:
        return result_changed(self.baseline_result, self.candidate_result)


@dataclass(frozen=True)
class Comparison:
    baseline: str  # the filters, as text
    candidate: str
    resamples: int
    seed: int
    level: float
    pairs: list[PairResult]
    ttft: Interval  # geometric mean over pairs
    decode: Interval
    baseline_rates: Rates  # counters pooled over each side's runs
    candidate_rates: Rates
    unpaired_baseline: list[str]
    unpaired_candidate: list[str]
    # The pairs with their own interval, in rank_pairs' order; None: all of them.
    listed: list[int] | None = None


def _pooled(sides: Iterable[Side]) -> Rates:
    pooled: dict[str, float] = defaultdict(float)
    for side in sides:
        for name, value in side.totals.items():
            pooled[name] += value
    return rates(pooled)


def _labels(pairs: Sequence[tuple[Side, Side]]) -> list[str]:
    """Name each pair by the knobs that differ between pairs, not the ones all share."""
    knob_sets = [b.knobs for b, _ in pairs]
    engines = {b.engine for b, _ in pairs}
    names = dict.fromkeys(k for ks in knob_sets for k in ks)
    varying = [k for k in names if any(ks.get(k) != knob_sets[0].get(k) for ks in knob_sets)]
    labels = []
    for b, _ in pairs:
        parts = [b.engine] if len(engines) > 1 else []
        parts += [f"{k}={knob_text(b.knobs.get(k))}" for k in varying]
        labels.append(", ".join(parts) or "all knobs equal")
    return labels


def _log_change(ratio: float | None) -> float:
    """How far a ratio is from 1, either way (2x and 0.5x alike); 0 without one."""
    return abs(math.log(ratio)) if ratio is not None and math.isfinite(ratio) and ratio > 0 else 0.0


def rank_pairs(changed: Sequence[bool], ttft: Sequence[float | None], decode: Sequence[float | None]) -> list[int]:
    """Pair indices, the ones worth a row first: changed results, then the largest TTFT or
    decode change, then comparison order."""
    return sorted(range(len(changed)), key=lambda i: (
        not changed[i], -max(_log_change(ttft[i]), _log_change(decode[i])), i))


def result_changed(baseline_result: str, candidate_result: str) -> bool:
    # A control is correct by definition, so control -> clean is no change.
    same = {"control": "clean"}
    return same.get(baseline_result, baseline_result) != same.get(candidate_result, candidate_result)


def _started(work: Callable[..., T], *args: Any) -> Callable[[], T]:
    """``work(*args)`` started in a thread of its own; the function returned waits for its
    result (or raises its exception). A plain thread: concurrent.futures costs more to
    import (~2 ms) than this needs."""
    import threading

    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, work(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            out.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        ok, value = out[0]
        if not ok:
            raise value
        return value

    return result


def compare_sides(
    pairs: Sequence[tuple[Side, Side]],
    baseline: str = "",
    candidate: str = "",
    unpaired_baseline: Sequence[str] = (),
    unpaired_candidate: Sequence[str] = (),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    listed: int | None = None,
) -> Comparison:
    """Ratios (candidate/baseline) for every pair and over all of them.

    ``listed``: how many pairs get their own interval, the first of :func:`rank_pairs`'
    order (None: every pair, in comparison order). The others keep their estimates;
    the overall intervals are the same either way.
    """
    samples = [(b.samples, c.samples) for b, c in pairs]
    ttft_pairs = stacked(samples, "ttft_s")
    draw_ahead(ttft_pairs, resamples, seed)
    decode_pairs = stacked(samples, "decode_tps")
    draw_ahead(decode_pairs, resamples, seed)  # the same count as TTFT's, usually: nothing to draw
    order: list[int] | None = None
    if listed is not None and listed < len(pairs):
        changed = [result_changed(b.result, c.result) for b, c in pairs]
        order = rank_pairs(changed, ttft_pairs.estimates().tolist(), decode_pairs.estimates().tolist())[:listed]
    wanted = set(order) if order is not None else None
    # The two metrics in two threads (numpy releases the GIL in the matrix products,
    # sorts and gathers that are most of their time) while this one names the pairs and
    # works out their rates.
    ttft_job = _started(ratio_intervals, ttft_pairs, resamples, seed, level, wanted)
    decode_job = _started(ratio_intervals, decode_pairs, resamples, seed, level, wanted)
    # Runs of one comparison often recorded the same counters (compare_groups hands such
    # sides one shared dict): each distinct dict's rates are worked out once.
    known: dict[int, Rates] = {}

    def rates_of(totals: Mapping[str, float]) -> Rates:
        found = known.get(id(totals))
        if found is None:
            found = known[id(totals)] = rates(totals)
        return found

    named = [(label, rates_of(b.totals), rates_of(c.totals)) for (b, c), label in zip(pairs, _labels(pairs))]
    baseline_rates, candidate_rates = _pooled(b for b, _ in pairs), _pooled(c for _, c in pairs)
    ttft, ttft_all = ttft_job()
    decode, decode_all = decode_job()
    results = [
        PairResult(label, b.cell_id, c.cell_id, b.result, c.result, t, d, b_rates, c_rates)
        for (b, c), (label, b_rates, c_rates), t, d in zip(pairs, named, ttft, decode)
    ]
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        resamples=resamples,
        seed=seed,
        level=level,
        pairs=results,
        ttft=ttft_all,
        decode=decode_all,
        baseline_rates=baseline_rates,
        candidate_rates=candidate_rates,
        unpaired_baseline=list(unpaired_baseline),
        unpaired_candidate=list(unpaired_candidate),
        listed=order,
    )


def compare_groups(
    source: Readable,
    baseline: Sequence[CellFilter],
    candidate: Sequence[CellFilter],
    sweep_id: int | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    listed: int | None = None,
) -> Comparison:
    """Select, pair and compare cells of the store (of one sweep, or all), latest runs;
    ``listed`` as :func:`compare_sides` takes it."""
    pairing = pair_cells(cell_results(source, sweep_id, with_timings=False, brief=True), baseline, candidate)
    run_ids = [cell.run_id for pair in pairing.pairs for cell in pair if cell.run_id is not None]
    samples: dict[int, PackedSamples] = {}
    # Counters decoded once per distinct text; sides with the same text share the dict.
    decoded: dict[str, dict[str, float]] = {}
    totals: dict[int, dict[str, float]] = {}
    for run_id, (requests, keys, ttft, decode, raw) in comparison_rows(source, run_ids).items():
        if requests > 0:
            samples[run_id] = PackedSamples(keys, None, ttft, decode)
        if isinstance(raw, str):
            found = decoded.get(raw)
            if found is None:
                found = decoded[raw] = json.loads(raw)
            raw = found
        if raw:
            totals[run_id] = raw
    empty = RunSamples()

    def side(cell: CellResult) -> Side:
        run = cell.run_id
        found = samples.get(run, empty) if run is not None else empty
        return Side(cell.cell_id, cell.engine, cell.knobs, run, cell.result, found, totals.get(run, {}) if run else {})

    return compare_sides(
        [(side(b), side(c)) for b, c in pairing.pairs],
        baseline=", ".join(map(str, baseline)),
        candidate=", ".join(map(str, candidate)),
        unpaired_baseline=[c.cell_id for c in pairing.unpaired_baseline],
        unpaired_candidate=[c.cell_id for c in pairing.unpaired_candidate],
        resamples=resamples,
        seed=seed,
        level=level,
        listed=listed,
    )
