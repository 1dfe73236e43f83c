"""Which requests of two runs pair up, and their values laid out for the statistics.

``results compare`` holds each request of a baseline run against the same request (same
``key``) of the candidate run; :func:`matched` gives the values of one metric for the
requests measured in both, and :func:`stacked` gives those of many pairs of runs at
once, laid out as :class:`db.statistics.Stacked`, the matrices the bootstrap works on.
Pure: samples in (as stored, :class:`db.samples.PackedSamples`, or decoded), arrays out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vmatrix.db.samples import NAN_BYTES, PackedSamples, RunSamples, SamplesDecoder
from vmatrix.db.statistics import Stacked

Samples = RunSamples | PackedSamples


def matched(baseline: Samples, candidate: Samples, metric: str) -> tuple[Sequence[float], Sequence[float]]:
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


def stacked(pairs: Sequence[tuple[Samples, Samples]], metric: str) -> Stacked:
    """:func:`matched` values of ``metric`` for every pair, laid out as
    :class:`db.statistics.Stacked` (the same values, in the same rows and groups).

    The usual pair (both runs stored with the same keys text, nothing unmeasured) is the
    one :func:`matched` reads by position: its stored bytes go into its group's matrix as
    they are, joined with the others' (one ``np.frombuffer`` a group, not two arrays a
    pair and a matrix built from them), and whether a NaN is among them is asked of the
    matrix, not of each byte string (a substring search, ~0.7 us an array). Any other
    pair, and one whose arrays hold a NaN, goes through :func:`matched`.
    """
    values: list[tuple[Any, Any]] = []  # per pair: two byte strings, or two sequences of values
    by_size: dict[int, list[int]] = defaultdict(list)  # the pairs of byte strings, by length
    for i, (b, c) in enumerate(pairs):
        if type(b) is PackedSamples and type(c) is PackedSamples and b.keys == c.keys:
            b_blob, c_blob = getattr(b, metric), getattr(c, metric)
            if len(b_blob) == len(c_blob) and len(b_blob) % 8 == 0:
                by_size[len(b_blob)].append(i)
                values.append((b_blob, c_blob))
                continue
        values.append(matched(b, c, metric))
    joined: dict[int, tuple[Any, Any]] = {}  # by length: the byte strings' matrices, when no NaN is in them
    for size, group in by_size.items():
        b_rows, c_rows = (np.frombuffer(b"".join([values[i][side] for i in group]), "<f8").reshape(len(group), size // 8)
                          for side in (0, 1))
        nan = np.flatnonzero(np.isnan(b_rows).any(axis=1) | np.isnan(c_rows).any(axis=1)).tolist()
        for row in nan:
            i = group[row]
            values[i] = matched(pairs[i][0], pairs[i][1], metric)
        if not nan:
            joined[size // 8] = (b_rows, c_rows)
    counts: list[int] = []
    members: dict[int, list[int]] = defaultdict(list)
    for i, (b_values, c_values) in enumerate(values):
        m = len(b_values) // 8 if type(b_values) is bytes else len(b_values)
        if m != (len(c_values) // 8 if type(c_values) is bytes else len(c_values)):
            raise ValueError(f"pair {i}: {len(b_values)} baseline values but {len(c_values)} candidate values")
        counts.append(m)
        members[m].append(i)
    groups = {}
    for m, group in members.items():
        if not m:
            continue
        if m in joined and group == by_size[m * 8]:  # the usual case: the matrices are those checked for NaN
            groups[m] = (np.asarray(group), *joined[m])
            continue
        sides = []
        for side in (0, 1):
            rows = [values[i][side] for i in group]
            if all(type(row) is bytes for row in rows):
                matrix = np.frombuffer(b"".join(rows), "<f8")
            else:
                matrix = np.array([np.frombuffer(r, "<f8") if type(r) is bytes else r for r in rows], dtype=np.float64)
            sides.append(matrix.reshape(len(group), m))
        groups[m] = (np.asarray(group), sides[0], sides[1])
    return Stacked(counts, groups)
