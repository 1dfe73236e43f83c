"""Scaling of independent cells over GPUs, with Ray's logical GPUs on this machine.

    python benchmarks/ray_scaling.py --cells 4 --hold 20

Runs N cell-shaped tasks (each asks Ray for ``num_gpus=1``, like a cell with
``resources: {gpus: 1}``, and holds its GPU for ``--hold`` seconds) twice: on a Ray
with N logical GPUs and on a Ray with 1. Efficiency = T(1 GPU) / (N x T(N GPUs)).

What this measures, and what not: the host has no GPUs and 2 CPU cores, so a task
here cannot run a GPU engine, and N CPU engines side by side would measure core
contention, not the orchestrator. The task holds its GPU with a sleep, which is what
a GPU-bound engine looks like to the host: it measures whether scheduling hands out
GPUs so that N cells really run at once (and each gets its own GPU id), i.e. the
orchestrator's share of scaling, not an engine's. Each task also checks that its
GPU ids are disjoint from every concurrently running task's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import ray

COLD = False


@ray.remote
def cell(hold_s: float) -> tuple[list[str], float, float]:
    start = time.time()
    ids = [str(i) for i in ray.get_gpu_ids()]
    time.sleep(hold_s)
    return ids, start, time.time()


def run(n_cells: int, gpus: int, hold_s: float) -> tuple[float, list[tuple[list[str], float, float]]]:
    for attempt in range(3):  # a loaded host sometimes makes the raylet late (see scheduler._start_local_ray)
        try:
            ray.init(address="local", num_cpus=max(n_cells, 2), num_gpus=gpus, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    try:
        # Start the N worker processes first: a sweep starts each once (seconds on a busy
        # host), while its cells take minutes; --cold leaves this out.
        if not COLD:
            ray.get([cell.options(num_gpus=min(1, gpus), num_cpus=0.1).remote(1) for _ in range(n_cells)])
        t0 = time.monotonic()
        out = ray.get([cell.options(num_gpus=1, num_cpus=0.1).remote(hold_s) for _ in range(n_cells)])
        return time.monotonic() - t0, out
    finally:
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=4)
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--cold", action="store_true", help="Count starting the worker processes too.")
    args = ap.parse_args()
    global COLD
    COLD = args.cold
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="vmr-bench-"))
    os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    t_n, out = run(args.cells, args.cells, args.hold)
    for i, (ids, s, e) in enumerate(out):
        for ids2, s2, e2 in out[i + 1:]:
            if s < e2 and s2 < e:  # overlapping in time: must hold different GPUs
                assert not set(ids) & set(ids2), (ids, ids2)
    t_1, _ = run(args.cells, 1, args.hold)
    eff = t_1 / (args.cells * t_n)
    print(f"{'cold' if COLD else 'warm'} workers, cells={args.cells} hold={args.hold:.0f}s  {args.cells} GPUs: {t_n:.2f} s  1 GPU: {t_1:.2f} s  "
          f"speed-up {t_1 / t_n:.2f}x  efficiency {eff:.1%}  gpu ids: {sorted(i for ids, _, _ in out for i in ids)}")


if __name__ == "__main__":
    main()
