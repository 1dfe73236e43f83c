"""Bootstrap confidence intervals for speed ratios: the statistics of ``vmatrix results
compare``, apart from the queries and pairing that feed them (db/compare.py), as asv
keeps its statistics.py apart. Pure numpy: pairs of value sequences in, intervals out.

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
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from vmatrix.errors import InputError

DEFAULT_RESAMPLES = 1000


DEFAULT_LEVEL = 0.95


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


T = TypeVar("T")


def _shared(make: Callable[..., T]) -> Callable[..., T]:
    """Draws and weights the two metrics of one comparison share (same seed, same sizes),
    made once under a lock of their own (compare_sides runs the metrics in two threads,
    and :func:`draw_ahead` draws in a third: the weights must not wait for the draws)."""
    # A comparison needs one entry per request count (weights, small) or one in all (the
    # stage-two indices, tens of MB at 5,000 pairs): a few entries, kept small.
    cached = functools.lru_cache(maxsize=4)(make)
    lock = threading.Lock()

    def get(*args: Any) -> T:
        with lock:
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


def draw_ahead(data: Stacked, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> None:
    """Start drawing, in a thread, the stage-two pairs :func:`ratio_intervals` will most
    likely want for ``data``: as many as there are pairs of two requests or more with a
    positive ratio (a pair is left out besides only when a resample of it sums to zero).
    The draws are cached (:func:`_pair_draws`), so ratio_intervals finds them ready, or
    draws its own when its count differs: only time is at stake, the numbers are those
    of the seed whoever draws them. numpy draws without the GIL, so the ~0.03 s of 5
    million draws at 5,000 pairs overlap the comparison's Python work."""
    estimates = data.estimates()
    indices = [index for m, (index, _, _) in data.groups.items() if m >= 2]
    if not indices:
        return
    ratios = estimates[np.concatenate(indices)]
    with np.errstate(invalid="ignore"):
        p = int(np.count_nonzero(np.isfinite(ratios) & (ratios > 0)))
    if p >= 2 and resamples >= 1:
        threading.Thread(target=_pair_draws, args=(seed, p, resamples), daemon=True).start()


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


class Stacked:
    """Pairs laid out for the arithmetic: per request count m (in the order the counts
    first appear), the indices of the pairs of m matched requests and their baseline and
    candidate values, a (pairs x m) float64 row each (no group for m = 0); and each
    pair's count. What :func:`ratio_intervals` and :func:`point_estimates` work on,
    made from value pairs by :meth:`of`, or by a caller that has the rows at hand
    (``db.compare`` puts runs' stored bytes into the matrices as they are).
    """

    def __init__(self, counts: list[int], groups: dict[int, tuple[Any, Any, Any]]) -> None:
        self.counts = counts
        self.groups = groups  # m -> (pair indices, baseline rows, candidate rows)
        self._estimates: Any = None

    @classmethod
    def of(cls, pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Stacked:
        groups = {}
        for m, members in _by_length(pairs).items():
            if m:
                b, c = _stacked(pairs, members, m)
                groups[m] = (np.asarray(members), b, c)
        return cls([len(b) for b, _ in pairs], groups)

    def estimates(self) -> Any:
        """Each pair's mean(candidate)/mean(baseline) (NaN without data), worked out once:
        the ranking of the pairs and their intervals both read them."""
        if self._estimates is None:
            out = np.full(len(self.counts), np.nan)
            with np.errstate(divide="ignore", invalid="ignore"):
                for index, b, c in self.groups.values():
                    out[index] = c.sum(axis=1) / b.sum(axis=1)
            self._estimates = out
        return self._estimates


Pairs = Sequence[tuple[Sequence[float], Sequence[float]]] | Stacked


def ratio_intervals(
    pairs: Pairs,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    wanted: Collection[int] | None = None,
) -> tuple[list[Interval], Interval]:
    """Per pair: mean(candidate)/mean(baseline) over matched requests with its interval;
    and the geometric mean over pairs with a two-stage bootstrap interval.

    ``pairs`` holds (baseline values, candidate values), matched element by element
    (sequences or numpy arrays), or those laid out already (:class:`Stacked`).
    ``wanted``: the pairs whose own interval is worked out (None: all); the others get
    their estimate and no bounds. The overall interval is the
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
    data = pairs if isinstance(pairs, Stacked) else Stacked.of(pairs)
    n = len(data.counts)
    estimates = data.estimates()
    lows = np.full(n, np.nan)
    highs = np.full(n, np.nan)
    usable = np.zeros(n, dtype=bool)
    want = np.ones(n, dtype=bool)
    if wanted is not None:
        want[:] = False
        want[np.asarray(list(wanted), dtype=np.int64)] = True
    replicates: list[tuple[Any, Any]] = []  # (pair indices, their replicate rows)
    for m, (index, b, c) in data.groups.items():
        if m < 2:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            weights = _request_weights(seed, m, resamples)
            # Into one preallocated matrix, a block of pairs at a time: the divisor's
            # product then lives in a small reused buffer, not 20 MB of fresh pages
            # (zeroing those was a large part of the command's system time here).
            ratios = np.empty((len(index), resamples), dtype=np.float32)
            step = max(1, (1 << 18) // resamples)
            below = np.empty((min(step, len(index)), resamples), dtype=np.float32)
            c32, b32 = c.astype(np.float32), b.astype(np.float32)
            for r0 in range(0, len(index), step):
                r1 = min(r0 + step, len(index))
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

    # Each pair's interval where it is usable and wanted; its estimate either way. The
    # overall interval averages the usable pairs with a positive ratio, wanted or not.
    shown = (usable & want).tolist()
    values = estimates.tolist()
    per_pair = [
        Interval(_finite(e), lo if s else None, hi if s else None, count)
        for count, e, lo, hi, s in zip(data.counts, values, lows.tolist(), highs.tolist(), shown)
    ]
    with np.errstate(invalid="ignore"):
        chosen = np.flatnonzero(usable & np.isfinite(estimates) & (estimates > 0)).tolist()
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
    geometric_mean = math.exp(sum(math.log(values[i]) for i in chosen) / p)
    return per_pair, Interval(geometric_mean, low, high, p)


def point_estimates(pairs: Pairs) -> list[float]:
    """Each pair's ratio mean(candidate)/mean(baseline), NaN without data: what ranks the
    pairs before any resampling (:func:`rank_pairs`)."""
    return (pairs if isinstance(pairs, Stacked) else Stacked.of(pairs)).estimates().tolist()
