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
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from vmatrix.db.reads import PREFIX_HITS, PREFIX_QUERIES, CellResult, Readable, cell_results, counter_texts, sample_rows
from vmatrix.db.samples import (  # noqa: F401 - decode_tps re-exported
    NAN_BYTES,
    PackedSamples,
    RunSamples,
    SamplesDecoder,
    counter_totals,
    decode_tps,
)
from vmatrix.db.table import knob_text
from vmatrix.errors import InputError
from vmatrix.selector import normal, split

# This module imports no SQLAlchemy: `results compare` reads through db/reads.py.

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


def load_packed_samples(source: Readable, run_ids: Iterable[int]) -> dict[int, PackedSamples]:
    """As :func:`load_samples`, left as stored: :func:`matched` decodes only what it must."""
    return {run_id: PackedSamples(*row) for run_id, row in sample_rows(source, run_ids).items()}


def matched(baseline: RunSamples | PackedSamples, candidate: RunSamples | PackedSamples,
            metric: str) -> tuple[Sequence[float], Sequence[float]]:
    """Values of ``metric`` ("ttft_s" or "decode_tps") for requests measured in both runs.

    Packed samples (as stored) with the very same keys text and no unmeasured request
    are matched by position without decoding anything: identical text parses to
    identical keys, and the float arrays are read by numpy as they are. Anything else is
    decoded and matched as below.
    """
    if isinstance(baseline, PackedSamples) or isinstance(candidate, PackedSamples):
        if isinstance(baseline, PackedSamples) and isinstance(candidate, PackedSamples):
            b_blob: bytes = getattr(baseline, metric)
            c_blob: bytes = getattr(candidate, metric)
            if baseline.keys == candidate.keys and NAN_BYTES not in b_blob and NAN_BYTES not in c_blob:
                # ndarrays, which ratio_intervals takes as it takes sequences
                return np.frombuffer(b_blob, "<f8"), np.frombuffer(c_blob, "<f8")  # type: ignore[return-value]
        decoder = SamplesDecoder()
        if isinstance(baseline, PackedSamples):
            baseline = decoder.unpack(baseline)
        if isinstance(candidate, PackedSamples):
            candidate = decoder.unpack(candidate)
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


# Draws and weights the two metrics of one comparison share (same seed, same sizes),
# made once under a lock: compare_sides runs the metrics in two threads.
_SHARED_LOCK = threading.Lock()
T = TypeVar("T")


def _shared(make: Callable[..., T]) -> Callable[..., T]:
    # A comparison needs one entry per request count (weights, small) or one in all (the
    # stage-two indices, tens of MB at 5,000 pairs): a few entries, kept small.
    cached = functools.lru_cache(maxsize=4)(make)

    def get(*args: Any) -> T:
        with _SHARED_LOCK:
            return cached(*args)

    return get


@_shared
def _request_weights(seed: int, m: int, resamples: int) -> Any:
    """(m x resamples) float32: how often each of m requests is drawn in each resample.

    The draws are the generator's, seeded by (seed, m), as they always were; a pair of
    m requests' replicates are then two matrix products with these weights. float32,
    because the products are ~7x faster than in float64 on the project machine, and the
    counts (at most m) and sums of ~100 timings lose nothing an interval's two printed
    digits can show (docs/BENCHMARKS.md gives the measured difference).
    """
    rng = np.random.default_rng([seed, 0, m])
    draws = rng.integers(0, m, size=(resamples, m))  # int64: bincount below takes them as they are
    counts = np.bincount((draws + m * np.arange(resamples)[:, None]).ravel(), minlength=resamples * m)
    return np.ascontiguousarray(counts.reshape(resamples, m).T, dtype=np.float32)


@_shared
def _pair_draws(seed: int, p: int, resamples: int) -> Any:
    """(resamples x p): the pairs each replicate of the overall interval averages, as
    flat indices into a (p x resamples) matrix: draw j of replicate r, pair i, is
    element i * resamples + r. Shared by the two metrics, so the index arithmetic
    (5 M values) is done once.

    Drawn as int32: the same numbers as the int64 draws numpy gives by default for any
    p below 2**31 (both take 32 random bits per draw; tests/test_results_queries.py
    checks), at a quarter of the time and half the memory.
    """
    rng = np.random.default_rng([seed, 1, p])
    draws = rng.integers(0, p, size=(resamples, p), dtype=np.int32)
    if p * resamples > np.iinfo(np.int32).max:
        draws = draws.astype(np.int64)
    draws *= resamples
    draws += np.arange(resamples, dtype=draws.dtype)[:, None]
    return draws


def _lerp(a: Any, b: Any, t: float) -> Any:
    # numpy's own interpolation for its default ("linear") quantile method.
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def _row_quantiles(rows: Any, tails: tuple[float, float]) -> tuple[Any, Any, Any]:
    """Per row, the ``tails`` quantiles as ``np.quantile(rows, q, axis=1)`` computes them
    (linear interpolation between order statistics), and whether the row is usable: all
    values finite and positive (a zero-sum resample gives NaN, or inf from n/0).

    A full sort of each row, not ``np.partition`` of just the four order statistics
    needed: numpy 2's float32 sort is vectorised (x86-simd-sort) and measured 3-5x
    faster than partitioning here (5,000 rows of 1,000: ~0.03 s against ~0.15 s). The
    sorted rows also answer "usable" from their ends (NaN sorts last).
    """
    n = rows.shape[1]
    ordered = np.sort(rows, axis=1)
    usable = (ordered[:, 0] > 0) & np.isfinite(ordered[:, -1])
    out = []
    for q in tails:
        pos = q * (n - 1)
        lo = math.floor(pos)
        a = ordered[:, lo].astype(np.float64)
        b = ordered[:, min(lo + 1, n - 1)].astype(np.float64)
        out.append(_lerp(a, b, pos - lo))
    return out[0], out[1], usable


def _by_length(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> dict[int, list[int]]:
    """Pair indices by request count: the pairs of one count are one matrix, row per pair."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (b, c) in enumerate(pairs):
        if len(b) != len(c):
            raise ValueError(f"pair {i}: {len(b)} baseline values but {len(c)} candidate values")
        groups[len(b)].append(i)
    return groups


def _stacked(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], members: list[int],
             m: int) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and candidate values of ``members`` (pairs of ``m`` requests), a row each."""
    b = np.array([pairs[i][0] for i in members], dtype=np.float64).reshape(len(members), m)
    c = np.array([pairs[i][1] for i in members], dtype=np.float64).reshape(len(members), m)
    return b, c


def _chosen(per_pair: list[Interval], usable: Sequence[bool]) -> list[int]:
    """The pairs the overall interval averages: those whose replicates give an interval
    (``usable``, whether or not it was worked out, see ``wanted``) and a positive ratio."""
    return [i for i, (iv, ok) in enumerate(zip(per_pair, usable)) if ok and iv.estimate and iv.estimate > 0]


def _geometric_mean(per_pair: list[Interval], chosen: list[int]) -> float:
    return math.exp(sum(math.log(per_pair[i].estimate or 1.0) for i in chosen) / len(chosen))


def ratio_intervals(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    wanted: Collection[int] | None = None,
) -> tuple[list[Interval], Interval]:
    """Per pair: mean(candidate)/mean(baseline) over matched requests with its interval;
    and the geometric mean over pairs with a two-stage bootstrap interval.

    ``pairs`` holds (baseline values, candidate values), matched element by element
    (sequences or numpy arrays). ``wanted``: the pairs whose own interval is worked out
    (None: all); the others get their estimate and no bounds. The overall interval is the
    same either way: its stage two reads every pair's replicates, not their quantiles.

    Matrix arithmetic, laid out pairs x resamples. Per request count m: the replicates
    of every pair with m requests are ``(C @ W) / (B @ W)`` with W the shared
    (m x resamples) resample counts; a pair's interval is two quantiles of its row. The
    overall interval's replicate r averages the logs of the pairs replicate r drew, each
    at that pair's own replicate r.
    """
    if resamples < 1:
        raise InputError.naming("{resamples} must be at least 1")
    tails = ((1 - level) / 2, 1 - (1 - level) / 2)
    groups = _by_length(pairs)
    n = len(pairs)
    estimates = np.full(n, np.nan)
    lows = np.full(n, np.nan)
    highs = np.full(n, np.nan)
    usable = np.zeros(n, dtype=bool)
    want = np.ones(n, dtype=bool)
    if wanted is not None:
        want[:] = False
        want[np.asarray(list(wanted), dtype=np.int64)] = True
    replicates: list[tuple[Any, Any]] = []  # (pair indices, their replicate rows)
    for m, members in groups.items():
        if m == 0:
            continue
        index = np.asarray(members)
        b, c = _stacked(pairs, members, m)
        with np.errstate(divide="ignore", invalid="ignore"):
            estimates[index] = c.sum(axis=1) / b.sum(axis=1)
            if m < 2:
                continue
            weights = _request_weights(seed, m, resamples)
            # Into one preallocated matrix, a block of pairs at a time: the divisor's
            # product then lives in a small reused buffer, not 20 MB of fresh pages
            # (zeroing those was a large part of the command's system time here).
            ratios = np.empty((len(members), resamples), dtype=np.float32)
            step = max(1, (1 << 18) // resamples)
            below = np.empty((min(step, len(members)), resamples), dtype=np.float32)
            c32, b32 = c.astype(np.float32), b.astype(np.float32)
            for r0 in range(0, len(members), step):
                r1 = min(r0 + step, len(members))
                np.matmul(c32[r0:r1], weights, out=ratios[r0:r1])
                np.matmul(b32[r0:r1], weights, out=below[: r1 - r0])
                ratios[r0:r1] /= below[: r1 - r0]
            if wanted is None:
                low, high, ok = _row_quantiles(ratios, tails)
            else:
                # Usable without sorting every row: a pair not listed needs only that
                # (the overall interval's choice of pairs), not its quantiles.
                ok = (ratios.min(axis=1) > 0) & np.isfinite(ratios.max(axis=1))
                ask = np.flatnonzero(want[index])
                low, high = np.full(len(index), np.nan), np.full(len(index), np.nan)
                if len(ask):
                    low[ask], high[ask], _ = _row_quantiles(ratios[ask], tails)
        # A pair with a zero-sum resample has no usable interval.
        if not ok.all():
            index, ratios, low, high = index[ok], ratios[ok], low[ok], high[ok]
        usable[index] = True
        lows[index], highs[index] = low, high
        replicates.append((index, ratios))

    per_pair = [
        Interval(_finite(e), lo if ok else None, hi if ok else None, len(b))
        for (b, _), e, lo, hi, ok in zip(pairs, estimates.tolist(), lows.tolist(), highs.tolist(), usable.tolist())
    ]
    chosen = _chosen(per_pair, usable.tolist())
    if wanted is not None:
        per_pair = [iv if w else Interval(iv.estimate, None, None, iv.n) for iv, w in zip(per_pair, want.tolist())]
    if len(chosen) < 2:
        return per_pair, per_pair[chosen[0]] if chosen else NO_DATA
    p = len(chosen)
    if len(replicates) == 1 and len(replicates[0][0]) == p:  # the usual case: rows already in chosen order
        rows = replicates[0][1]
    else:
        row_of = np.full(n, -1)
        rows = np.empty((p, resamples), dtype=np.float32)
        row_of[chosen] = np.arange(p)
        for index, ratios in replicates:
            keep = row_of[index] >= 0
            rows[row_of[index[keep]]] = ratios[keep]
    # Stage two: replicate r takes, for each pair drawn, that pair's replicate r: element
    # (pair, r) of the pairs x resamples matrix, by flat index. The rows are this
    # function's own (computed above), so the logs overwrite them.
    logs = np.log(rows, out=rows).ravel()
    draws = _pair_draws(seed, p, resamples)
    # A block of replicates at a time, not all at once: np.take casts int32 indices to
    # intp, so one gather of 5,000 x 1,000 made 40 MB of indices and 20 MB of picks per
    # metric, and zeroing fresh pages was most of the system time of `results compare`
    # on the project machine (perf: clear_page_erms ~48% of its cycles). The blocks
    # reuse the same memory; each replicate's sum is the same as before.
    sums = np.empty(resamples, dtype=np.float64)
    block = max(1, (1 << 18) // p)
    for r0 in range(0, resamples, block):
        sums[r0:r0 + block] = np.take(logs, draws[r0:r0 + block]).sum(axis=1, dtype=np.float64)
    overall = np.exp(sums / p)
    # _row_quantiles, not np.quantile: the same numbers (numpy's own interpolation),
    # without np.quantile's import of numpy.ma (~0.03 s of a `results compare`).
    (low,), (high,), _ = _row_quantiles(overall[None, :], tails)
    low, high = float(low), float(high)
    return per_pair, Interval(_geometric_mean(per_pair, chosen), low, high, p)


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


@dataclass(frozen=True)
class Side:
    """One cell of a pair with what its latest run recorded."""

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


def point_estimates(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Each pair's ratio mean(candidate)/mean(baseline), NaN without data: what ranks the
    pairs before any resampling (:func:`rank_pairs`)."""
    out = np.full(len(pairs), np.nan)
    for m, members in _by_length(pairs).items():
        if m == 0:
            continue
        b, c = _stacked(pairs, members, m)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[np.asarray(members)] = c.sum(axis=1) / b.sum(axis=1)
    return out.tolist()


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
    ttft_pairs = [matched(b.samples, c.samples, "ttft_s") for b, c in pairs]
    decode_pairs = [matched(b.samples, c.samples, "decode_tps") for b, c in pairs]
    order: list[int] | None = None
    if listed is not None and listed < len(pairs):
        changed = [result_changed(b.result, c.result) for b, c in pairs]
        order = rank_pairs(changed, point_estimates(ttft_pairs), point_estimates(decode_pairs))[:listed]
    wanted = set(order) if order is not None else None
    # The two metrics in two threads: numpy releases the GIL in the matrix products,
    # sorts and gathers that are most of their time.
    from concurrent.futures import ThreadPoolExecutor  # ~10 ms to import; only here

    with ThreadPoolExecutor(max_workers=1) as pool:
        ttft_job = pool.submit(ratio_intervals, ttft_pairs, resamples, seed, level, wanted)
        decode, decode_all = ratio_intervals(decode_pairs, resamples, seed, level, wanted)
        ttft, ttft_all = ttft_job.result()
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
    pairing = pair_cells(cell_results(source, sweep_id, with_timings=False), baseline, candidate)
    run_ids = [cell.run_id for pair in pairing.pairs for cell in pair if cell.run_id is not None]
    samples = load_packed_samples(source, run_ids)
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
        listed=listed,
    )
