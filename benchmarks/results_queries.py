"""How fast are the results queries on a large store? (issue 4)

Fills a fresh SQLite store (built through the migrations, as ``Store.open`` does) with
synthetic recorded results: 2 engines x 5,000 knob combinations = 10,000 cells, one
run each, 100 requests per run = 1,000,000 request rows, plus per-phase counters, the
run's ``run_samples`` summary row (as ``Store.record_run`` writes it) and a grade per
run. Rows go in with SQLAlchemy core ``insert()`` executemany, in batches of 50,000
requests. A ``--db`` made by an older version is upgraded first (migration 0003 backfills
``run_samples``), and that upgrade is timed. Then it times, best and median of
``--repeat``, wall clock and this process's CPU time:

* ``lookup_table`` over all 10,000 cells (engine rows x prefix_caching, speculative),
  for the sweep, and with ``full`` (every result listed);
* ``compare_groups`` of engine A vs engine B: 5,000 pairs, 1,000 bootstrap resamples
  per pair, plus the overall interval; and its parts (the cells, the pairing, the
  per-request samples as stored and decoded, the counters, the statistics alone);
* the two CLI commands end to end as a user runs them (a fresh Python process each,
  wall clock and the child's CPU time): ``vmatrix results table`` (and ``--full``) and
  ``vmatrix results compare`` (which lists 20 of the 5,000 pairs, as it does by
  default, and works out per-pair intervals for those 20 only; ``--all --format
  json`` for every pair's interval), and before them the interpreter start and CLI
  imports alone.

The in-process reads go through what the CLI reads through: stdlib sqlite3 on the
store file (``db.reads.SqliteFile``, the store being at head after opening it), not
SQLAlchemy (``db/reads.py`` says why).

Synthetic data, not engine runs: the numbers say how fast the queries are, nothing
about any engine. Results are written up in ``docs/BENCHMARKS.md``.

Run from the repository root:

    python benchmarks/results_queries.py            # a temporary 0.6 GiB database
    python benchmarks/results_queries.py --db /tmp/bench.db --keep   # reuse it next time
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# One BLAS thread, as `vmatrix results compare` sets it before numpy loads: with
# OpenBLAS's own threads the in-process statistics took ~0.63 CPU s instead of ~0.35
# (its threads spin between calls), and those idle spinning threads then took cores from
# the CLI processes timed after them (issue 42: compare's CLI median 0.72 -> 0.65 s).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from sqlalchemy import func, insert, select

from vmatrix.cells import Cell
from vmatrix.db.compare import (
    CellFilter,
    Side,
    compare_groups,
    compare_sides,
    load_packed_samples,
    load_samples,
    pair_cells,
)
from vmatrix.db.models import CellRow, GradeRow, MetricRow, RequestRow, Run, RunSampleRow, SweepCell
from vmatrix.db.reads import cell_results, comparison_rows, metric_totals_for, open_sqlite_at_head
from vmatrix.db.samples import summary_row
from vmatrix.db.store import Store
from vmatrix.db.table import lookup_table
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.recipe import EngineRecipe
from vmatrix.records import RequestRecord

ENGINES = (EngineRecipe(vllm="0.27.1"), EngineRecipe(vllm="0.28.0"))
SPECULATIVE = (None, *({"method": "mtp", "num_speculative_tokens": k} for k in (1, 2, 3)),
               {"method": "ngram", "num_speculative_tokens": 4})
BLOCK_SIZES = (16, 32, 64, 128, 256)
BATCHED_TOKENS = tuple(512 * i for i in range(1, 101))  # 2 x 5 x 5 x 100 = 5,000 combinations
SESSIONS, TURNS = 10, 9  # 90 turn requests + 10 agent switches = 100 requests per run
PHASES = [(f"turn-{t}", [f"s{s}/{t}" for s in range(SESSIONS)]) for t in range(TURNS)] + [
    (f"switch-{k}", [f"s{SESSIONS + k}/0"]) for k in range(10)
]
MODEL_DIGEST = "m" * 64
BATCH = 50_000


def knob_sets() -> list[dict[str, Any]]:
    return [
        Knobs.model_validate(
            {"prefix_caching": p, "speculative": s, "block_size": b, "max_num_batched_tokens": t}
        ).canonical()
        for p, s, b, t in itertools.product((False, True), SPECULATIVE, BLOCK_SIZES, BATCHED_TOKENS)
    ]


def fill(store: Store, seed: int = 0) -> int:
    """Insert the synthetic sweep; returns its id."""
    rng = random.Random(seed)
    sweep_id = store.create_sweep("bench", "benchmarks/results_queries.py", "synthetic\n")
    now = time.time()
    cells = []
    for engine in ENGINES:
        for knobs in knob_sets():
            cell_id = Cell.make_id(engine, knobs, MODEL_DIGEST, "w1")
            cells.append((cell_id, engine, knobs))
    with store.engine.begin() as conn:
        conn.execute(insert(CellRow), [
            {"id": cid, "engine_label": e.label, "env_id": e.env_id, "vllm_version": e.vllm,
             "accelerator": e.accelerator, "patches": None, "lmcache": None, "knobs": k,
             "model_digest": MODEL_DIGEST, "model_name": "canary:tiny-qwen3next", "workload_digest": "w1",
             "spec": {"id": cid, "knobs": k}, "control_id": None, "created_at": now + i}
            for i, (cid, e, k) in enumerate(cells)
        ])
        conn.execute(insert(SweepCell), [{"sweep_id": sweep_id, "cell_id": cid, "role": "cell"} for cid, _, _ in cells])
        conn.execute(insert(Run), [
            {"id": run_id, "cell_id": cid, "sweep_id": sweep_id, "status": "ok", "signature": None, "message": None,
             "fingerprint": {"vllm": e.vllm}, "timings": {"total_s": 300.0}, "log_path": f"/logs/{cid}.log",
             "node": "n1", "gpu_ids": [], "started_at": now, "finished_at": now + run_id}
            for run_id, (cid, e, _) in enumerate(cells, start=1)
        ])
        conn.execute(insert(GradeRow), [
            {"run_id": run_id, "control_run_id": None, "verdict": rng.choice(("clean", "clean", "corrupt")),
             "summary": "synthetic", "evidence": {}, "created_at": now}
            for run_id in range(1, len(cells) + 1)
        ])

    def requests(run_id: int, engine: EngineRecipe, knobs: dict[str, Any]) -> list[dict[str, Any]]:
        speed = 30.0 * (1.3 if engine.vllm == "0.28.0" else 1.0) * (1.4 if knobs["speculative"] else 1.0)
        rows = []
        for phase, keys in PHASES:
            for key in keys:
                n = rng.randint(16, 24)
                ttft = rng.uniform(0.1, 0.8)
                session, turn = key.split("/")
                rows.append({"run_id": run_id, "key": key, "session": session, "turn": int(turn), "phase": phase,
                             "prompt_tokens": 1500 + 50 * int(turn), "token_ids": [rng.randrange(50_000)] * n,
                             "logprobs": [-0.5] * n, "margins": [1.0] * n, "text": "t" * n,
                             "finish_reason": "length", "ttft_s": ttft,
                             "e2e_s": ttft + (n - 1) / (speed * rng.uniform(0.8, 1.2)), "error": None})
        return rows

    def metrics(knobs: dict[str, Any]) -> dict[str, dict[str, float]]:
        spec = knobs["speculative"]
        out = {}
        for phase, keys in PHASES:
            names: dict[str, float] = {}
            if knobs["prefix_caching"]:
                names |= {"vllm:prefix_cache_queries_total": 1600.0 * len(keys),
                          "vllm:prefix_cache_hits_total": 1100.0 * len(keys)}
            if spec:
                k, drafts = spec["num_speculative_tokens"], 50.0 * len(keys)
                per_pos = {f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}":
                           drafts * 0.7 / (p + 1) for p in range(k)}
                names |= per_pos | {"vllm:spec_decode_num_drafts_total": drafts,
                                    "vllm:spec_decode_num_draft_tokens_total": drafts * k,
                                    "vllm:spec_decode_num_accepted_tokens_total": sum(per_pos.values())}
            out[phase] = names
        return out

    # Per run: its requests and counters, and the summary row the store writes with them.
    request_rows: list[dict[str, Any]] = []
    metric_rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []

    def flush() -> None:
        for table, rows in ((RequestRow, request_rows), (MetricRow, metric_rows), (RunSampleRow, summaries)):
            if rows:
                with store.engine.begin() as conn:
                    conn.execute(insert(table), rows)
                rows.clear()

    for run_id, (_, engine, knobs) in enumerate(cells, start=1):
        reqs, mets = requests(run_id, engine, knobs), metrics(knobs)
        request_rows += reqs
        metric_rows += [{"run_id": run_id, "phase": phase, "name": name, "value": value}
                        for phase, names in mets.items() for name, value in names.items()]
        records = [RequestRecord(**{k: v for k, v in r.items() if k != "run_id"}) for r in reqs]
        summaries.append(summary_row(run_id, records, mets))  # type: ignore[arg-type]
        if len(request_rows) >= BATCH:
            flush()
    flush()
    store.finish_sweep(sweep_id)
    return sweep_id


def timed(label: str, fn: Callable[[], Any], repeat: int) -> Any:
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    print(f"{label:<58} best {min(walls):6.3f} s   median {statistics.median(walls):6.3f} s   "
          f"cpu median {statistics.median(cpus):6.3f} s", flush=True)
    return result


def bytecode_note() -> str:
    """Whether the CLI's imports have bytecode to load: without it every fresh process
    compiles numpy, Rich, Typer and the project from source (~0.4 CPU s more for
    `results compare` here). uv installs without bytecode unless --compile-bytecode (pip
    compiles), and PYTHONDONTWRITEBYTECODE=1 keeps Python from writing any."""
    import importlib.util

    import numpy
    import rich
    import typer

    import vmatrix.db.compare

    missing = [m.__name__ for m in (numpy, rich, typer, vmatrix.db.compare)
               if not Path(importlib.util.cache_from_source(m.__file__)).is_file()]  # type: ignore[arg-type]
    env = "PYTHONDONTWRITEBYTECODE=1" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode written"
    return f"bytecode: {'missing for ' + ', '.join(missing) if missing else 'present'} ({env})"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_cli(label: str, argv: list[str], repeat: int, imports_only: bool = False) -> None:
    """A CLI command as a user runs it: a fresh interpreter, imports and store opening
    included; CPU time is the child's (user + system). ``imports_only``: just start the
    interpreter and import the CLI, what every command pays before it does anything."""
    walls, cpus = [], []
    command = ["-c", "import vmatrix.orchestrator.cli"] if imports_only else ["-m", "vmatrix.orchestrator.cli", *argv]
    for _ in range(repeat):
        start, cpu = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, *command], check=True, stdout=subprocess.DEVNULL,
                       cwd=Path(__file__).resolve().parent.parent)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    print(f"{label:<58} best {min(walls):6.3f} s   median {statistics.median(walls):6.3f} s   "
          f"cpu median {statistics.median(cpus):6.3f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="database file (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep and reuse --db instead of deleting it")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--all-pairs", action="store_true",
                        help="also time `results compare --pairs 0` once (Rich laying out all 5,000 rows)")
    args = parser.parse_args()

    tmp = None if args.db else tempfile.TemporaryDirectory(prefix="vmatrix-bench-")
    path = args.db or Path(tmp.name) / "bench.db"  # type: ignore[union-attr]
    fresh = not path.exists()
    if not fresh:
        with sqlite3.connect(path) as conn:
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    start = time.perf_counter()
    store = Store.open(path)
    if not fresh and revision < "0003":
        print(f"upgraded {path} from migration {revision} in {time.perf_counter() - start:.1f} s "
              "(backfilling run_samples)", flush=True)
    try:
        if fresh:
            start = time.perf_counter()
            fill(store)
            print(f"filled {path} in {time.perf_counter() - start:.0f} s ({path.stat().st_size / 2**30:.2f} GiB)")
        with store.engine.connect() as conn:
            counts = {t.__tablename__: conn.execute(select(func.count()).select_from(t)).scalar()
                      for t in (CellRow, Run, RequestRow, MetricRow)}
        print("rows:", ", ".join(f"{n:,} {name}" for name, n in counts.items()), flush=True)
        # How much CPU this process gets: the project machine's 2 cores are often shared.
        start = time.perf_counter()
        sum(range(10**7))
        print(f"calibration: sum(range(10**7)) {time.perf_counter() - start:.3f} s; "
              f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)

        source = open_sqlite_at_head(path)
        assert source is not None, f"{path} is not at the newest migration after Store.open"
        table = timed("lookup_table (engine x prefix_caching, speculative)",
                      lambda: lookup_table(source, ["engine"], ["prefix_caching", "speculative"]), args.repeat)
        assert len(table.rows) == 2 and len(table.cols) == 10
        timed("lookup_table, sweep_id given",
              lambda: lookup_table(source, ["engine"], ["prefix_caching", "speculative"], sweep_id=1), args.repeat)
        timed("lookup_table, full (every result listed)",
              lambda: lookup_table(source, ["engine"], ["prefix_caching", "speculative"], full=True), args.repeat)

        a, b = [CellFilter("vllm", e.vllm) for e in ENGINES]
        result = timed(f"compare_groups vllm={a.value} vs {b.value} (end to end)",
                       lambda: compare_groups(source, [a], [b], resamples=args.resamples), args.repeat)
        print(f"  {len(result.pairs):,} pairs; decode ratio {result.decode.estimate:.3f} "
              f"[{result.decode.low:.3f}, {result.decode.high:.3f}], "
              f"TTFT ratio {result.ttft.estimate:.3f} [{result.ttft.low:.3f}, {result.ttft.high:.3f}]")

        cells = timed("  part: cell_results (all cells, latest runs)",
                      lambda: cell_results(source, with_timings=False), args.repeat)
        pairing = timed("  part: pair_cells", lambda: pair_cells(cells, [a], [b]), args.repeat)
        run_ids = [c.run_id for c in cells if c.run_id is not None]
        timed("  part: comparison_rows (what compare reads: samples, counters)",
              lambda: comparison_rows(source, run_ids), args.repeat)
        packed = timed("  part: load_packed_samples (as stored)", lambda: load_packed_samples(source, run_ids),
                       args.repeat)
        timed("  part: load_samples (decoded; the report's)", lambda: load_samples(source, run_ids), args.repeat)
        totals = timed("  part: metric_totals_for", lambda: metric_totals_for(source, run_ids), args.repeat)

        def side(c: Any) -> Side:
            return Side(c.cell_id, c.engine, c.knobs, c.run_id, c.result, packed[c.run_id], totals.get(c.run_id, {}))

        pairs = [(side(x), side(y)) for x, y in pairing.pairs]
        timed("  part: compare_sides (statistics only, 5,000 pairs)",
              lambda: compare_sides(pairs, resamples=args.resamples), args.repeat)

        db = ["--db", str(path)]
        print(bytecode_note(), flush=True)
        timed_cli("python -c 'import vmatrix.orchestrator.cli' (start + imports)", [], args.repeat, imports_only=True)
        timed_cli("vmatrix results table (CLI, fresh process)", ["results", "table", *db], args.repeat)
        timed_cli("vmatrix results table --full (CLI, fresh process)", ["results", "table", "--full", *db],
                  args.repeat)
        compare_argv = ["results", "compare", *db, "--baseline", f"vllm={a.value}", "--candidate", f"vllm={b.value}",
                        "--resamples", str(args.resamples)]
        timed_cli("vmatrix results compare (CLI, fresh process)", compare_argv, args.repeat)
        timed_cli("vmatrix results compare --all --format json", [*compare_argv, "--all", "--format", "json"],
                  args.repeat)
        if args.all_pairs:
            timed_cli("vmatrix results compare --pairs 0 (all 5,000 rows)", [*compare_argv, "--pairs", "0"], 1)
    finally:
        store.close()
        if tmp is not None:
            tmp.cleanup()
        elif not args.keep:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
