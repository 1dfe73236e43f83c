"""`results compare`'s statistics held to values recorded before issue 42's speed-up.

A small store, built the same way every time (seeded, recorded through ``Store`` as the
orchestrator records runs), covers what the comparison's paths tell apart: several
request counts (more than one matrix of pairs), a failed request (NaN in the stored
arrays), a run whose requests were recorded in another order, a run with a request the
other side lacks, a crashed candidate, a cell never run, a rerun (the latest run counts),
a pair whose baseline TTFT sums to zero in every resample (no interval, left out of the
overall), counters for the rates. ``tests/data/compare-recorded-4b87f1f.json`` holds
what the code at 4b87f1f (before issue 42's changes to db/compare.py,
db/statistics.py and db/reads.py) gave on it: ``compare_groups`` as JSON for three
comparisons, and the text ``vmatrix results compare`` printed. Regenerate it only for a
change that is meant to change the statistics (``python tests/test_compare_recorded.py
OUT.json``, on the code whose numbers are wanted), and say so in the commit.

The estimates are float64 sums and must agree to rounding; the interval bounds come from
float32 matrix products whose last bits depend on the BLAS kernel of the machine
(docs/BENCHMARKS.md), so they are compared to a relative 1e-6, far below the
difference any change of seed, resampling or estimator makes. The text output (two
decimals) must be the same string.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from vmatrix.cells import Cell, Grade, ModelRef, RunOutcome
from vmatrix.db.compare import CellFilter, compare_groups
from vmatrix.db.store import Store
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord, Transcript

EXPECTED = Path(__file__).parent / "data" / "compare-recorded-4b87f1f.json"
MODEL = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny-qwen3next")
OLD, NEW = EngineRecipe(vllm="0.31.0"), EngineRecipe(vllm="0.32.0")
SPECULATIVE = (None, {"method": "mtp", "num_speculative_tokens": 1}, {"method": "mtp", "num_speculative_tokens": 2},
               {"method": "ngram", "num_speculative_tokens": 3})
COMPARISONS = {  # name: (baseline, candidate, resamples, seed, listed)
    "vllm": ("vllm=0.31.0", "vllm=0.32.0", 300, 0, None),
    "vllm listed 4": ("vllm=0.31.0", "vllm=0.32.0", 300, 0, 4),
    "prefix seed 7": ("prefix_caching=off", "prefix_caching=on", 200, 7, None),
}
CLI_ARGS = ["--baseline", "vllm=0.31.0", "--candidate", "vllm=0.32.0", "--resamples", "300", "--pairs", "6"]


def _requests(rng: random.Random, n: int, speed: float) -> list[RequestRecord]:
    out = []
    for i in range(n):
        session, turn = f"s{i % 4}", i // 4
        tokens = rng.randint(8, 24)
        ttft = rng.uniform(0.1, 0.8)
        out.append(RequestRecord(
            key=f"{session}/{turn}", session=session, turn=turn, phase=f"turn-{turn}", prompt_tokens=100 + i,
            token_ids=list(range(tokens)), logprobs=[-0.1] * tokens, margins=[1.0] * tokens, text="x" * tokens,
            finish_reason="length", ttft_s=ttft, e2e_s=ttft + (tokens - 1) / (speed * rng.uniform(0.7, 1.3))))
    return out


def _metrics(prefix: bool, spec: dict[str, Any] | None, scale: float) -> dict[str, dict[str, float]]:
    names: dict[str, float] = {}
    if prefix:
        names |= {"vllm:prefix_cache_queries_total": 1600.0, "vllm:prefix_cache_hits_total": 1000.0 * scale}
    if spec:
        k, drafts = spec["num_speculative_tokens"], 80.0
        per_pos = {f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}": drafts * scale / (p + 2)
                   for p in range(k)}
        names |= per_pos | {"vllm:spec_decode_num_drafts_total": drafts,
                            "vllm:spec_decode_num_draft_tokens_total": drafts * k,
                            "vllm:spec_decode_num_accepted_tokens_total": sum(per_pos.values())}
    return {"turn-0": names}


def build(store: Store) -> None:
    """Two releases x 2 prefix caching x 4 speculative x 3 block sizes (24 pairs), and the
    edge cases of the module's docstring, from one seeded generator."""
    rng = random.Random(42)
    sweep = store.create_sweep("recorded", "r.yaml", "")
    combos = [(p, s, b) for p in (False, True) for s in SPECULATIVE for b in (16, 32, 64)]
    for index, (prefix, spec, block) in enumerate(combos):
        n = (10, 13, 7)[index % 3]  # three request counts
        for engine in (OLD, NEW):
            knobs = Knobs(prefix_caching=prefix, speculative=spec, block_size=block).canonical()
            cell = Cell(Cell.make_id(engine, knobs, MODEL.digest, "w1"), engine, knobs, MODEL, {"name": "w"}, "w1", None)
            store.add_cell(sweep, cell)
            new = engine is NEW
            if new and index == 5:
                continue  # a candidate cell never run
            speed = 30.0 * (1.3 if new else 1.0) * (1.4 if spec else 1.0)
            requests = _requests(rng, n, speed)
            if new and index == 1:
                requests[2].error = "HTTP 500"  # NaN in both stored arrays
            if new and index == 2:
                requests.reverse()  # same keys, recorded in another order
            if not new and index == 4:
                requests.append(_requests(rng, 1, speed)[0])  # a request the candidate lacks
                requests[-1].key = "extra/0"
            if not new and index == 7:
                for r in requests[1:]:  # one request's TTFT alone above zero: resamples without it sum to 0
                    r.e2e_s = (r.e2e_s or 0.0) - (r.ttft_s or 0.0)
                    r.ttft_s = 0.0
            status = "crashed" if new and index == 3 else "ok"
            transcript = Transcript(requests=requests, metrics=_metrics(prefix, spec, 0.9 if new else 1.0))
            run = store.record_run(sweep, RunOutcome(
                cell.id, status, 100.0, 200.0 + index, signature="boom" if status != "ok" else None,  # type: ignore[arg-type]
                transcript=transcript if status == "ok" else None))
            verdict = "crashed" if status != "ok" else rng.choice(("clean", "clean", "corrupt"))
            store.record_grade(run, Grade(verdict, "synthetic"))  # type: ignore[arg-type]
            if new and index == 6:  # a rerun, twice as fast: the comparison reads this one
                again = Transcript(requests=_requests(rng, n, speed * 2), metrics=_metrics(prefix, spec, 0.5))
                rerun = store.record_run(sweep, RunOutcome(cell.id, "ok", 300.0, 400.0, transcript=again))
                store.record_grade(rerun, Grade("clean", "rerun"))
    # A baseline cell without a partner.
    knobs = Knobs(block_size=128).canonical()
    lone = Cell(Cell.make_id(OLD, knobs, MODEL.digest, "w1"), OLD, knobs, MODEL, {"name": "w"}, "w1", None)
    store.add_cell(sweep, lone)
    store.record_run(sweep, RunOutcome(lone.id, "ok", 100.0, 250.0, transcript=Transcript(
        requests=_requests(rng, 10, 30.0), metrics=_metrics(False, None, 1.0))))
    store.finish_sweep(sweep)


def outputs(db: str) -> dict[str, Any]:
    """What the test compares: each comparison's ``dataclasses.asdict``, and the CLI's text."""
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli import app

    out: dict[str, Any] = {}
    store = Store.open(db)
    try:
        for name, (base, cand, resamples, seed, listed) in COMPARISONS.items():
            result = compare_groups(store, CellFilter.parse(base), CellFilter.parse(cand), resamples=resamples,
                                    seed=seed, listed=listed)
            out[name] = json.loads(json.dumps(dataclasses.asdict(result)))  # as `--format json` writes it
    finally:
        store.close()
    done = CliRunner().invoke(app, ["results", "compare", "--db", db, *CLI_ARGS])
    assert done.exit_code == 0, done.output
    out["cli text"] = done.stdout
    return out


def _same(actual: Any, expected: Any, where: str = "") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), where
        for key in expected:
            _same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(actual, bool):
        assert isinstance(actual, float) and math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-12), \
            f"{where}: {actual!r} != {expected!r}"
    else:
        assert actual == expected and type(actual) is type(expected), f"{where}: {actual!r} != {expected!r}"


def test_compare_gives_the_recorded_statistics(tmp_path: Path) -> None:
    db = str(tmp_path / "recorded.db")
    store = Store.open(db)
    build(store)
    store.close()
    expected = json.loads(EXPECTED.read_text())
    actual = outputs(db)
    assert actual["cli text"] == expected["cli text"]
    for name in COMPARISONS:
        _same(actual[name], expected[name], name)
    # The paths the store was built to reach are reached (guards the builder itself).
    pairs = expected["vllm"]["pairs"]
    assert len(pairs) == 24 and expected["vllm"]["unpaired_baseline"]
    assert any(p["ttft"]["estimate"] is not None and p["ttft"]["low"] is None for p in pairs)  # zero-sum TTFT
    assert sum(p["decode"]["estimate"] is None for p in pairs) == 2  # the crashed candidate, the one not run
    assert len({p["decode"]["n"] for p in pairs}) >= 4  # 7, 10, 13 requests, and fewer where one failed


if __name__ == "__main__":  # record: python tests/test_compare_recorded.py OUT.json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "recorded.db")
        opened = Store.open(path)
        build(opened)
        opened.close()
        Path(sys.argv[1]).write_text(json.dumps(outputs(path), indent=1, ensure_ascii=False) + "\n")
