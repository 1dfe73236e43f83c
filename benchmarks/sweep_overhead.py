"""Orchestrator overhead per cell: wall time that is neither engine start nor replay.

    python benchmarks/sweep_overhead.py examples/quickstart.yaml

Makes sure the matrix's venvs and canary exist (building them if needed, untimed),
then runs the matrix into a fresh results database and reports, per cell, where
the time went:
engine start and replay are the stack under test; everything else (venv lookup,
process spawn and teardown, storing and grading) is per-cell overhead; the
sweep's one-off setup (canary lookup, Ray start) is reported on its own. Also checks that the second sweep
builds no venv. Appends the table to docs/BENCHMARKS.md with --write.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from vmatrix.db.store import Store
from vmatrix.errors import EnvBuildError
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.orchestrator.sweep.scheduler import prepare_model, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("matrix", type=Path, nargs="?", default=Path("examples/quickstart.yaml"))
    ap.add_argument("--write", action="store_true", help="append the result to docs/BENCHMARKS.md")
    args = ap.parse_args()
    plan = expand(load_spec(args.matrix), str(args.matrix))
    tmp = Path(tempfile.mkdtemp(prefix="vmatrix-bench-"))
    store = Store.open(tmp / "bench.db")

    envs = cache_dir() / "envs"
    prepare_model(plan, tmp / "logs")
    for engine in {c.engine for c in plan.cells}:
        try:
            ensure_env(engine, tmp / "logs" / "env.log")
        except EnvBuildError:
            pass  # that cell's startup_failed is part of the measurement
    before = sorted(p.name for p in envs.iterdir())
    t0 = time.monotonic()
    res = run_sweep(plan, store, store.create_sweep("bench", str(args.matrix), ""), tmp / "logs")
    wall = time.monotonic() - t0
    built = sorted({p.name for p in envs.iterdir()} - set(before))

    rows = []
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        t = run.timings
        stack = t.get("startup_s", 0.0) + t.get("replay_s", 0.0)
        overhead = t["total_s"] - stack + res.driver_s.get(cell.id, 0.0)
        cell_time = t["total_s"] + res.driver_s.get(cell.id, 0.0)
        rows.append((cell.id[:12], run.status, t.get("startup_s", 0.0), t.get("replay_s", 0.0), overhead,
                     100 * overhead / cell_time))
    lines = [
        (f"`python benchmarks/sweep_overhead.py {args.matrix}` ({time.strftime('%Y-%m-%d')}, 2 cores, "
        f"{len(plan.cells)} cells, 2 at a time, venvs and canary already cached)"),
        "",
        "| cell | status | engine start s | replay s | overhead s | overhead % of cell |",
        "|---|---|---|---|---|---|",
        *[f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.2f} | {r[5]:.2f} |" for r in rows],
        "",
        (f"One-off sweep setup (canary lookup, Ray start): {res.setup_s:.1f} s "
        f"({res.setup_s / len(plan.cells):.1f} s per cell at this sweep size). "
        f"Median overhead {statistics.median(r[4] for r in rows):.2f} s per cell. Sweep wall time {wall:.0f} s. "
        f"Venvs built during the sweep: {len(built)}."),
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        doc = Path("docs/BENCHMARKS.md")
        doc.parent.mkdir(exist_ok=True)
        body = doc.read_text() if doc.exists() else "# Benchmarks\n"
        doc.write_text(body.rstrip() + "\n\n## Orchestrator overhead per cell\n\n" + text + "\n")


if __name__ == "__main__":
    main()
