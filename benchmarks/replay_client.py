"""Replay client overhead: how many streamed requests/s ``jobs.replay`` sustains and
how much latency it adds per request, against a stub on loopback, next to a raw
socket client (the floor) on the same stub in the same process.

    python benchmarks/replay_client.py                  # 3 runs of each measurement, medians
    python benchmarks/replay_client.py --write          # also append the table to docs/BENCHMARKS.md

The server is benchmarks/stub_stream_server.py in its own process: a fixed,
recorded-format vLLM chat-completion stream, NOT an engine; it answers at once,
so what is measured is the client. Each run measures, one after the other (so a
busy machine weighs on both alike; ``--repeats`` runs, medians reported, load
average noted because this machine is shared):

- ``send``: ``--requests`` requests through ``jobs.replay.send`` on the aiohttp
  session ``replay()`` makes (``jobs.replay.client_session``), ``--concurrency`` in flight;
  also at ``--low-concurrency``;
- ``replay``: the same through ``replay()`` over a Workload of phases of
  ``--concurrency`` requests (adds a ``/metrics`` scrape before and after each phase);
- ``raw``: the same load through a raw asyncio client that writes pre-encoded
  requests and reads to the last chunk without parsing: the ceiling of this stub +
  event loop + machine;
- ``latency``: at concurrency 1, per-request wall time of ``send`` minus that of
  the raw client (same request, same stub, taking turns request by request), p50
  and p99. That difference is everything the client does per request: building and
  encoding the body, aiohttp's request and response, SSE line splitting, JSON
  parsing of every chunk.

Before measuring, ``send`` must record what the stub sent for a normal stream, an
HTTP 500, an error event and a dropped connection. Targets: at least 1,000
requests/s at 256 in flight, under 1 ms added latency at p50. Loopback only,
bounded request counts, a hard ``--max-seconds`` on the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vmatrix.jobs.replay import client_session, replay, send
from vmatrix.jobs.trace_synth import synth_trace
from vmatrix.jobs.traces import trace_to_workload
from vmatrix.workload import ReplayRequest, Workload

ROOT = Path(__file__).resolve().parent.parent
MODEL = "stub"

# ---------------------------------------------------------------- the stub, in its own process


class Stub:
    """benchmarks/stub_stream_server.py as a child process on 127.0.0.1 (a free port)."""

    def __init__(self, max_seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "stub_stream_server.py"), "--port", "0",
             "--max-seconds", str(max_seconds)],
            stdout=subprocess.PIPE, text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        match = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"stub did not start: {line!r}")
        self.base_url = match.group(1)
        self.port = int(self.base_url.rsplit(":", 1)[1])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---------------------------------------------------------------- clients


class RawClient:
    """The floor: keep-alive sockets, pre-encoded request bytes, read to the last chunk, no parsing."""

    def __init__(self, port: int, body: bytes) -> None:
        self.port = port
        self.request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(body), body))
        self.pool: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def one(self) -> None:
        conn = self.pool.pop() if self.pool else await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = conn
        writer.write(self.request)
        buf = b""
        while not buf.endswith(b"0\r\n\r\n"):
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("stub closed the connection")
            buf += data
        self.pool.append(conn)

    def close(self) -> None:
        for _, writer in self.pool:
            writer.close()


def _body(req: ReplayRequest, max_tokens: int, top_logprobs: int, model: str = MODEL) -> bytes:
    # The body jobs.replay.send builds (kept equal by hand; only the bytes' size matters here).
    return json.dumps({
        "model": model, "messages": req.chat_messages(), "max_tokens": max_tokens, "temperature": 0, "seed": 0,
        "ignore_eos": True, "logprobs": True, "top_logprobs": top_logprobs, "return_tokens_as_token_ids": True,
        "stream": True, "stream_options": {"include_usage": True},
    }).encode()


# ---------------------------------------------------------------- measurements


@dataclass
class Setup:
    base_url: str
    port: int
    requests: list[ReplayRequest]
    max_tokens: int
    top_logprobs: int


@dataclass
class Rate:
    per_s: float  # requests per wall second
    cpu_ms: float  # this process's CPU per request: the client's cost, robust to a busy machine


async def throughput(s: Setup, n: int, concurrency: int) -> Rate:
    """``n`` requests with ``concurrency`` in flight on replay()'s session, like one big phase."""
    client = client_session(600)
    try:
        await asyncio.gather(*(send(client, s.base_url, MODEL, r, s.max_tokens, s.top_logprobs)
                               for r in (s.requests * concurrency)[:concurrency]))  # warm: connections open
        sem = asyncio.Semaphore(concurrency)
        failed = 0

        async def one(i: int) -> None:
            nonlocal failed
            async with sem:
                rec = await send(client, s.base_url, MODEL, s.requests[i % len(s.requests)], s.max_tokens,
                                 s.top_logprobs)
                failed += rec.error is not None or len(rec.token_ids) != s.max_tokens

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await client.close()
    if failed:
        raise RuntimeError(f"{failed} of {n} requests failed against the stub")
    return Rate(n / wall, 1000 * cpu / n)


async def throughput_replay(s: Setup, n: int, concurrency: int) -> Rate:
    """``jobs.replay.replay`` over phases of ``concurrency`` requests (plus two /metrics scrapes a phase)."""
    phases = []
    for p in range(max(1, n // concurrency)):
        reqs = tuple(ReplayRequest(key=f"b{p}-{i}", session=f"b{i}", turn=p, phase=f"phase-{p}",
                                   messages=s.requests[(p * concurrency + i) % len(s.requests)].messages)
                     for i in range(concurrency))
        phases.append((f"phase-{p}", reqs))
    wl = Workload(name="bench", phases=tuple(phases), max_tokens=s.max_tokens, top_logprobs=s.top_logprobs)
    c0, t0 = time.process_time(), time.perf_counter()
    transcript = await replay(s.base_url, MODEL, wl, timeout_s=600)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    bad = sum(r.error is not None for r in transcript.requests)
    if bad or len(transcript.requests) != len(wl.requests):
        raise RuntimeError(f"replay against the stub: {bad} errors, {len(transcript.requests)} of {len(wl.requests)} done")
    return Rate(len(wl.requests) / wall, 1000 * cpu / len(wl.requests))


async def throughput_raw(s: Setup, n: int, concurrency: int) -> Rate:
    raw = RawClient(s.port, _body(s.requests[-1], s.max_tokens, s.top_logprobs))
    await asyncio.gather(*(raw.one() for _ in range(concurrency)))
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await raw.one()

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    raw.close()
    return Rate(n / wall, 1000 * cpu / n)


async def latency(s: Setup, n: int) -> dict[str, list[float]]:
    """Per-request wall time at concurrency 1; ``send`` and the raw client take turns request by request."""
    req = s.requests[-1]
    raw = RawClient(s.port, _body(req, s.max_tokens, s.top_logprobs))
    client = client_session(600)
    times: dict[str, list[float]] = {"raw": [], "send": []}
    try:
        for k in range(20 + n):  # 20 warm-up rounds: connections, caches
            t0 = time.perf_counter()
            await raw.one()
            if k >= 20:
                times["raw"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rec = await send(client, s.base_url, MODEL, req, s.max_tokens, s.top_logprobs)
            if k >= 20:
                times["send"].append(time.perf_counter() - t0)
            if rec.error is not None or len(rec.token_ids) != s.max_tokens:
                raise RuntimeError(f"send: bad record against the stub: {rec.error}")
    finally:
        raw.close()
        await client.close()
    return times


async def records_right(s: Setup) -> None:
    """``send`` must record what the stub sent, failures included, before anything is timed."""
    client = client_session(60)
    try:
        recs = {model: await send(client, s.base_url, MODEL if model == "ok" else model, s.requests[-1], s.max_tokens,
                                  s.top_logprobs)
                for model in ("ok", "stub-500", "stub-error-chunk", "stub-drop")}
    finally:
        await client.close()
    ok, e500, event, drop = recs.values()
    checks = {
        "a normal stream": ok.error is None and len(ok.token_ids) == s.max_tokens and ok.finish_reason == "length",
        "HTTP 500": e500.error == "HTTP 500: stub: forced failure" and not e500.token_ids,
        "an error event": event.error == "stub: stream failed" and len(event.token_ids) == 2,
        "a dropped connection": (drop.error or "").startswith("ClientPayloadError") and len(drop.token_ids) == 2,
    }
    wrong = [name for name, right in checks.items() if not right]
    if wrong:
        raise RuntimeError(f"send records wrongly: {', '.join(wrong)}: {recs}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------- driver

ALL = ("send", "replay", "raw", "latency")


def main() -> None:
    ap = argparse.ArgumentParser(description="Replay client overhead against a loopback stub (not an engine).")
    ap.add_argument("--requests", type=int, default=4000, help="requests per throughput run")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--low-concurrency", type=int, default=16, help="send also at this concurrency (0: skip)")
    ap.add_argument("--latency-requests", type=int, default=500, help="sequential requests per latency run")
    ap.add_argument("--tokens", type=int, default=24, help="streamed tokens per request (max_tokens)")
    ap.add_argument("--top-logprobs", type=int, default=2)
    ap.add_argument("--prefix-tokens", type=int, default=1500, help="shared prefix of the request bodies")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=ALL, action="append", help="run only these measurements (e.g. under a profiler)")
    ap.add_argument("--max-seconds", type=float, default=540, help="hard limit on the whole run")
    ap.add_argument("--write", action="store_true", help="append the results to docs/BENCHMARKS.md")
    args = ap.parse_args()
    if args.requests > 100_000 or args.concurrency > 4096:
        ap.error("bounded on purpose: at most 100000 requests and 4096 in flight")

    # The quickstart's workload shape, as a trace (no pydantic needed where this runs).
    trace = synth_trace(seed=0, sessions=3, turns=3, prefix_tokens=args.prefix_tokens, switches=1)
    wl = trace_to_workload(trace, max_tokens=args.tokens, top_logprobs=args.top_logprobs)
    stub = Stub(max_seconds=args.max_seconds + 30)
    setup = Setup(stub.base_url, stub.port, wl.requests, args.tokens, args.top_logprobs)
    only = set(args.only or ALL)
    results: dict[str, list[float]] = {}
    loads: list[float] = []

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)
        print(f"  {name}: {value:,.3f}", flush=True)

    async def run() -> None:
        await records_right(setup)
        for k in range(args.repeats):
            print(f"run {k + 1}/{args.repeats} (load average {os.getloadavg()[0]:.2f})", flush=True)
            loads.append(os.getloadavg()[0])
            if "send" in only:
                r = await throughput(setup, args.requests, args.concurrency)
                record(f"send @{args.concurrency} req/s", r.per_s)
                record(f"send @{args.concurrency} CPU ms/req", r.cpu_ms)
            if "raw" in only:
                r = await throughput_raw(setup, args.requests, args.concurrency)
                record(f"raw @{args.concurrency} req/s", r.per_s)
                record(f"raw @{args.concurrency} CPU ms/req", r.cpu_ms)
            if "send" in only and args.low_concurrency:
                r = await throughput(setup, args.requests, args.low_concurrency)
                record(f"send @{args.low_concurrency} req/s", r.per_s)
                record(f"send @{args.low_concurrency} CPU ms/req", r.cpu_ms)
            if "replay" in only:
                r = await throughput_replay(setup, args.requests, args.concurrency)
                record("replay() req/s", r.per_s)
                record("replay() CPU ms/req", r.cpu_ms)
            if "latency" in only:
                t = await latency(setup, args.latency_requests)
                record("raw e2e p50 ms", 1000 * pct(t["raw"], 0.5))
                record("raw e2e p99 ms", 1000 * pct(t["raw"], 0.99))
                record("send added p50 ms", 1000 * (pct(t["send"], 0.5) - pct(t["raw"], 0.5)))
                record("send added p99 ms", 1000 * (pct(t["send"], 0.99) - pct(t["raw"], 0.99)))

    try:
        asyncio.run(asyncio.wait_for(run(), timeout=args.max_seconds))
    finally:
        stub.close()
    medians = {name: statistics.median(values) for name, values in results.items()}
    body_kb = len(_body(wl.requests[-1], args.tokens, args.top_logprobs)) / 1024
    print(f"\nmedians of {args.repeats} runs ({args.tokens} tokens x top-{args.top_logprobs} per request, "
          f"bodies up to {body_kb:.1f} KiB, concurrency {args.concurrency}, load average "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs):")
    for name, value in medians.items():
        print(f"  {name:28} {value:10,.3f}   (runs: {', '.join(f'{v:,.3f}' for v in results[name])})")
    rate, added = medians.get(f"send @{args.concurrency} req/s"), medians.get("send added p50 ms")
    if rate is not None:
        print(f"target >= 1,000 req/s at {args.concurrency} in flight: {'met' if rate >= 1000 else 'NOT met'} ({rate:,.0f})")
    if added is not None:
        print(f"target < 1 ms added at p50: {'met' if added < 1 else 'NOT met'} ({added:.3f} ms)")
    if args.write:
        _write(args, medians, results, loads, body_kb)


def _write(args: argparse.Namespace, medians: dict[str, float], results: dict[str, list[float]],
           loads: list[float], body_kb: float) -> None:
    # A whole section of its own, appended: never edits what is there, and cannot land
    # under another section that was appended after the main write-up.
    path = ROOT / "docs" / "BENCHMARKS.md"
    rows = "\n".join(f"| {name} | {value:,.2f} | {', '.join(f'{v:,.2f}' for v in results[name])} |"
                     for name, value in medians.items())
    text = (f"\n## Replay client overhead: run of {time.strftime('%Y-%m-%d')} (Python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
            f"{os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f})\n\n"
            f"`{' '.join(['python', 'benchmarks/replay_client.py', *sys.argv[1:]])}`: {args.requests} requests, "
            f"concurrency {args.concurrency}, {args.tokens} tokens x top-{args.top_logprobs}, bodies up to "
            f"{body_kb:.1f} KiB.\n\n| measurement | median | runs |\n|---|---|---|\n{rows}\n")
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
