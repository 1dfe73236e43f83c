"""A run's per-request timings and counter totals, summarised once when the run is recorded.

Comparisons and the report need, per request, only its key, phase, TTFT and decode
speed, and per run only its counters summed over phases. The ``requests`` table holds
them among token ids, logprobs, margins and text, so reading them from there reads every
wide row (seconds for a million requests). :class:`db.store.Store` therefore writes one
``run_samples`` row per run next to the requests, in the same transaction, and readers
take that row instead (docs/schema.md, docs/BENCHMARKS.md).

Encoding of a ``run_samples`` row (migration 0003 writes the same for older runs):

* ``keys``, ``phases``: JSON lists of strings, in recorded order. Runs of one workload
  share them, so readers parse each distinct text once.
* ``ttft_s``, ``decode_tps``: little-endian float64 arrays, NaN where not measured
  (a failed request; for decode speed also a single-token request).
* ``counters``: JSON object, each Prometheus counter's delta summed over the phases.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vmatrix.records import RequestRecord


def decode_tps(n_tokens: int, ttft_s: float | None, e2e_s: float | None) -> float | None:
    """Tokens per second after the first token; None where that is not measurable.

    The first token's time is prefill (TTFT), so it is left out of both the count and
    the interval. Requests with one token, or no time after it, have no decode speed.
    """
    if ttft_s is None or e2e_s is None or n_tokens < 2 or e2e_s <= ttft_s:
        return None
    return (n_tokens - 1) / (e2e_s - ttft_s)


@dataclass(frozen=True)
class RunSamples:
    """Per-request timing of one run, in recorded order; None where not measured (a failed
    request, or for decode speed a request with a single token)."""

    keys: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    ttft_s: tuple[float | None, ...] = ()
    decode_tps: tuple[float | None, ...] = ()

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> RunSamples:
        keys, phases, ttft, decode = [], [], [], []
        for r in records:
            keys.append(r.key)
            phases.append(r.phase)
            ok = r.error is None
            ttft.append(r.ttft_s if ok else None)
            decode.append(decode_tps(len(r.token_ids), r.ttft_s, r.e2e_s) if ok else None)
        return cls(tuple(keys), tuple(phases), tuple(ttft), tuple(decode))


def pack_floats(values: Iterable[float | None]) -> bytes:
    """Little-endian float64, NaN for None."""
    floats = [math.nan if v is None else float(v) for v in values]
    return struct.pack(f"<{len(floats)}d", *floats)


NAN_BYTES = struct.pack("<d", math.nan)  # what pack_floats writes for "not measured"


@functools.lru_cache(maxsize=64)
def _floats(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}d")


def unpack_floats(blob: bytes) -> tuple[float | None, ...]:
    """The inverse of :func:`pack_floats`.

    One C-level unpack; the per-value pass that turns NaN back into None runs only for
    arrays that hold the NaN :func:`pack_floats` writes (a failed or one-token request).
    """
    values = _floats(len(blob) // 8).unpack(blob)
    if NAN_BYTES in blob:
        return tuple(None if math.isnan(v) else v for v in values)
    return values


def counter_totals(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per-phase counter deltas (as a transcript records them) summed over phases."""
    totals: dict[str, float] = defaultdict(float)
    for samples in metrics.values():
        for name, value in samples.items():
            totals[name] += value
    return dict(totals)


def summary_row(run_id: int, requests: list[RequestRecord],
                metrics: Mapping[str, Mapping[str, float]]) -> dict[str, Any] | None:
    """The ``run_samples`` row of a run with this transcript; None when it recorded nothing."""
    if not requests and not metrics:
        return None
    samples = RunSamples.from_records(requests)
    return {
        "run_id": run_id,
        "requests": len(requests),
        "keys": json.dumps(samples.keys, ensure_ascii=False),
        "phases": json.dumps(samples.phases, ensure_ascii=False),
        "ttft_s": pack_floats(samples.ttft_s),
        "decode_tps": pack_floats(samples.decode_tps),
        "counters": counter_totals(metrics),
    }


@dataclass(frozen=True)
class PackedSamples:
    """A ``run_samples`` row's request columns as stored, for readers that may not need
    them decoded: two runs whose keys texts are identical match request by request, by
    position, so comparing them needs neither the keys parsed nor the floats turned into
    Python objects (``db.compare.matched`` reads the arrays with numpy as they are)."""

    keys: str
    phases: str | None  # None: not read (a comparison matches requests by their keys alone)
    ttft_s: bytes
    decode_tps: bytes


class SamplesDecoder:
    """Turns ``run_samples`` columns back into :class:`RunSamples`, parsing each distinct
    keys/phases text once (runs of one workload share them)."""

    def __init__(self) -> None:
        self._lists: dict[str, tuple[str, ...]] = {}

    def strings(self, text: str) -> tuple[str, ...]:
        found = self._lists.get(text)
        if found is None:
            found = self._lists[text] = tuple(json.loads(text))
        return found

    def unpack(self, packed: PackedSamples) -> RunSamples:
        phases = "[]" if packed.phases is None else packed.phases  # not read: none to give
        return self.samples(packed.keys, phases, packed.ttft_s, packed.decode_tps)

    def samples(self, keys: str, phases: str, ttft_s: bytes, decode: bytes) -> RunSamples:
        return RunSamples(self.strings(keys), self.strings(phases), unpack_floats(ttft_s), unpack_floats(decode))


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics, as numpy's default method."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
