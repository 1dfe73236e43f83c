"""Replay client overhead: how many streamed requests/s ``jobs.replay`` sustains and
how much latency it adds per request, against a stub on loopback.

    python benchmarks/replay_client.py                  # 3 runs of each measurement, medians
    python benchmarks/replay_client.py --write          # also append the table to docs/BENCHMARKS.md

The server is benchmarks/stub_stream_server.py in its own process: a fixed,
recorded-format vLLM chat-completion stream, NOT an engine; it answers at once,
so what is measured is the client. Measurements (each ``--repeats`` times,
medians reported, load average noted because this machine is shared):

- throughput: ``--requests`` requests through ``jobs.replay.send`` on the
  AsyncClient ``replay()`` makes, ``--concurrency`` in flight, over each of its
  transports: ``send`` = the lean one (jobs/transport.py, the default),
  ``send_httpx`` = httpx's own (httpcore + h11, VMATRIX_REPLAY_TRANSPORT=httpx);
  the same through ``replay()`` over a Workload of phases of ``--concurrency``
  requests (adds a ``/metrics`` scrape per phase); and the same load through a
  raw asyncio client that writes pre-encoded requests and reads to the last
  chunk without parsing: the ceiling of this stub + event loop + machine.
- added latency: at concurrency 1, per-request wall time of ``send`` minus that
  of the raw client (same request, same stub, interleaved), p50 and p99. That
  difference is everything the client does per request: building and encoding the
  body, httpx and its transport, SSE line splitting, JSON parsing of every chunk.

- h11: the CPU that h11 alone would spend framing one request and its stub
  answer (no sockets): why jobs/transport.py frames HTTP/1.1 itself.

Before measuring, ``send`` over both transports must record the same thing for a
normal stream, an HTTP 500, an error event and a dropped connection.
Loopback only, bounded request counts, a hard ``--max-seconds`` on the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.records import RequestRecord
from jobs.replay import _client, replay, send
from jobs.traces import synth_trace, trace_to_workload
from jobs.workload import ReplayRequest, Workload

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


@dataclass(frozen=True)
class Kind:
    """A client under test: ``jobs.replay.send`` over one of replay()'s transports."""

    transport: str  # "lean" (replay()'s default) or "httpx" (httpx's own httpcore + h11 stack)
    send: Callable[..., Awaitable[RequestRecord]] = send

    def open(self, s: Setup, concurrency: int) -> httpx.AsyncClient:
        return _client(600, self.transport)  # replay()'s own client: same limits, same transport


KINDS = {"send": Kind("lean"), "send_httpx": Kind("httpx")}


@dataclass
class Rate:
    per_s: float  # requests per wall second
    cpu_ms: float  # this process's CPU per request: the client's cost, robust to a busy machine


async def throughput(s: Setup, kind: Kind, n: int, concurrency: int) -> Rate:
    """``n`` requests with ``concurrency`` in flight on one client, like one big phase."""
    client = kind.open(s, concurrency)
    try:
        await asyncio.gather(*(kind.send(client, s.base_url, MODEL, r, s.max_tokens, s.top_logprobs)
                               for r in (s.requests * concurrency)[:concurrency]))  # warm: connections open
        sem = asyncio.Semaphore(concurrency)
        failed = 0

        async def one(i: int) -> None:
            nonlocal failed
            async with sem:
                rec = await kind.send(client, s.base_url, MODEL, s.requests[i % len(s.requests)], s.max_tokens,
                                      s.top_logprobs)
                failed += rec.error is not None or len(rec.token_ids) != s.max_tokens

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await client.aclose()
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


async def latency(s: Setup, kinds: dict[str, Kind], n: int) -> dict[str, list[float]]:
    """Per-request wall time at concurrency 1; the clients take turns request by request."""
    req = s.requests[-1]
    raw = RawClient(s.port, _body(req, s.max_tokens, s.top_logprobs))
    clients = {name: k.open(s, 1) for name, k in kinds.items()}
    times: dict[str, list[float]] = {"raw": [], **{name: [] for name in kinds}}
    try:
        for k in range(20 + n):  # 20 warm-up rounds: connections, caches
            t0 = time.perf_counter()
            await raw.one()
            if k >= 20:
                times["raw"].append(time.perf_counter() - t0)
            for name, kind in kinds.items():
                t0 = time.perf_counter()
                rec = await kind.send(clients[name], s.base_url, MODEL, req, s.max_tokens, s.top_logprobs)
                if k >= 20:
                    times[name].append(time.perf_counter() - t0)
                if rec.error is not None or len(rec.token_ids) != s.max_tokens:
                    raise RuntimeError(f"{name}: bad record against the stub: {rec.error}")
    finally:
        raw.close()
        for c in clients.values():
            await c.aclose()
    return times


async def same_records(s: Setup) -> None:
    """``send`` must record the same over both transports, failures included."""
    for model in (MODEL, "stub-500", "stub-error-chunk", "stub-drop"):
        recs = {}
        for name, kind in KINDS.items():
            client = kind.open(s, 1)
            try:
                recs[name] = await kind.send(client, s.base_url, model, s.requests[-1], s.max_tokens, s.top_logprobs)
            finally:
                await client.aclose()
        def strip(r: RequestRecord) -> dict:
            return {**r.__dict__, "ttft_s": None, "itl_s": len(r.itl_s), "e2e_s": None}  # timings differ; their count must not

        ref = strip(recs["send"])
        for name, rec in recs.items():
            if strip(rec) != ref:
                raise RuntimeError(f"{name} records differently from send for model {model}: {strip(rec)} != {ref}")


def h11_framing(s: Setup, n: int = 2000) -> float:
    """CPU ms per request that h11 alone would cost to frame one request and its stub answer.

    Why the lean transport parses HTTP itself: measured, not assumed.
    """
    import h11

    spec = importlib.util.spec_from_file_location("stub_stream_server", ROOT / "benchmarks" / "stub_stream_server.py")
    assert spec and spec.loader
    stub = sys.modules["stub_stream_server"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(stub)
    wire = (stub._SSE_HEAD + b"".join(stub.StubServer().token_events(s.max_tokens, s.top_logprobs, MODEL))
            + stub._DONE + b"0\r\n\r\n")
    body = _body(s.requests[-1], s.max_tokens, s.top_logprobs)
    head = h11.Request(method="POST", target="/v1/chat/completions",
                       headers=[("host", "127.0.0.1"), ("content-type", "application/json"),
                                ("content-length", str(len(body)))])
    c0 = time.process_time()
    for _ in range(n):
        conn = h11.Connection(h11.CLIENT)
        conn.send(head)
        conn.send(h11.Data(data=body))
        conn.send(h11.EndOfMessage())
        conn.receive_data(wire)
        while not isinstance(event := conn.next_event(), h11.EndOfMessage) and event is not h11.NEED_DATA:
            pass
    return 1000 * (time.process_time() - c0) / n


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------- driver

ALL = ("send", "send_httpx", "replay", "raw", "latency", "h11")


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
        await same_records(setup)
        for k in range(args.repeats):
            print(f"run {k + 1}/{args.repeats} (load average {os.getloadavg()[0]:.2f})", flush=True)
            loads.append(os.getloadavg()[0])
            for name in ("send", "send_httpx"):
                if name in only:
                    r = await throughput(setup, KINDS[name], args.requests, args.concurrency)
                    record(f"{name} req/s", r.per_s)
                    record(f"{name} CPU ms/req", r.cpu_ms)
                if name in only and args.low_concurrency:
                    # httpcore scans its whole pool on every request start and close: fewer connections, less CPU.
                    r = await throughput(setup, KINDS[name], args.requests, args.low_concurrency)
                    record(f"{name} @{args.low_concurrency} req/s", r.per_s)
                    record(f"{name} @{args.low_concurrency} CPU ms/req", r.cpu_ms)
            if "replay" in only:
                r = await throughput_replay(setup, args.requests, args.concurrency)
                record("replay() req/s", r.per_s)
                record("replay() CPU ms/req", r.cpu_ms)
            if "raw" in only:
                r = await throughput_raw(setup, args.requests, args.concurrency)
                record("raw client req/s", r.per_s)
                record("raw client CPU ms/req", r.cpu_ms)
            if "h11" in only:
                record("h11 framing alone CPU ms/req", h11_framing(setup))
            if "latency" in only:
                t = await latency(setup, KINDS, args.latency_requests)
                record("raw e2e p50 ms", 1000 * pct(t["raw"], 0.5))
                record("raw e2e p99 ms", 1000 * pct(t["raw"], 0.99))
                for name in KINDS:
                    record(f"{name} added p50 ms", 1000 * (pct(t[name], 0.5) - pct(t["raw"], 0.5)))
                    record(f"{name} added p99 ms", 1000 * (pct(t[name], 0.99) - pct(t["raw"], 0.99)))

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
    if args.write:
        _write(args, medians, results, loads, body_kb)


def _write(args: argparse.Namespace, medians: dict[str, float], results: dict[str, list[float]],
           loads: list[float], body_kb: float) -> None:
    # A whole section of its own, appended: never edits what is there, and cannot land
    # under another section that was appended after the main write-up.
    path = ROOT / "docs" / "BENCHMARKS.md"
    rows = "\n".join(f"| {name} | {value:,.2f} | {', '.join(f'{v:,.2f}' for v in results[name])} |"
                     for name, value in medians.items())
    text = (f"\n## Replay client overhead: run of {time.strftime('%Y-%m-%d')} (Python {platform.python_version()}, httpx {httpx.__version__}, "
            f"{os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f})\n\n"
            f"`{' '.join(['python', 'benchmarks/replay_client.py', *sys.argv[1:]])}`: {args.requests} requests, "
            f"concurrency {args.concurrency}, {args.tokens} tokens x top-{args.top_logprobs}, bodies up to "
            f"{body_kb:.1f} KiB.\n\n| measurement | median | runs |\n|---|---|---|\n{rows}\n")
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
