"""Replay client overhead: how many streamed requests/s ``jobs.replay`` sustains and
how much latency it adds per request, against a stub on loopback.

    python benchmarks/replay_client.py                  # 3 runs of each measurement, medians
    python benchmarks/replay_client.py --write          # also append the table to docs/BENCHMARKS.md

The server is benchmarks/stub_stream_server.py in its own process: a fixed,
recorded-format vLLM chat-completion stream, NOT an engine; it answers at once,
so what is measured is the client. Measurements (each ``--repeats`` times,
medians reported, load average noted because this machine is shared):

- throughput: ``--requests`` requests through ``jobs.replay.send`` on one
  AsyncClient with ``replay``'s connection limits, ``--concurrency`` in flight;
  the same through ``replay()`` over a Workload of phases of ``--concurrency``
  requests (adds a ``/metrics`` scrape per phase); and the same load through a
  raw asyncio client that writes pre-encoded requests and reads to the last
  chunk without parsing: the ceiling of this stub + event loop + machine.
- added latency: at concurrency 1, per-request wall time of ``send`` minus that
  of the raw client (same request, same stub, interleaved), p50 and p99. That
  difference is everything the client does per request: building and encoding the
  body, httpx/httpcore, SSE line splitting, JSON parsing of every chunk.

Also measures ``lean_send``: a prototype of the fix proposed for jobs/replay.py
(same RequestRecord, see its docstring), so the write-up can say what the fix buys.
Loopback only, bounded request counts, a hard ``--max-seconds`` on the whole run.
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.records import RequestRecord
from jobs.replay import _error_message, apply_chunk, replay, send
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


async def lean_send(
    client: httpx.AsyncClient, base_url: str, model: str, req: ReplayRequest, max_tokens: int, top_logprobs: int
) -> RequestRecord:
    """Prototype of the proposed jobs/replay.py ``send``: same body, same RequestRecord.

    Differences: the body is encoded once here and passed as ``content=`` bytes;
    the stream is read with ``aiter_raw()`` and split on the SSE event separator
    by hand (no per-line text decoding and line splitting in httpx's LineDecoder);
    a chunk's ``top_logprobs`` margin takes max and second max without sorting.
    """
    rec = RequestRecord(key=req.key, session=req.session, turn=req.turn, phase=req.phase)
    content = _body(req, max_tokens, top_logprobs, model)
    t0 = time.perf_counter()
    text: list[str] = []
    loads = json.loads
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", content=content,
                                 headers={"content-type": "application/json"}) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:500]
                rec.error = f"HTTP {resp.status_code}: {_error_message(detail)}"
                rec.e2e_s = time.perf_counter() - t0
                return rec
            pending = b""
            done = False
            async for raw in resp.aiter_raw():
                events = (pending + raw).split(b"\n\n")
                pending = events.pop()
                for event in events:
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    if not apply_chunk(rec, loads(event[6:]), text, t0):
                        done = True
                        break
                if done:
                    break
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    rec.text = "".join(text)
    rec.e2e_s = time.perf_counter() - t0
    return rec


class MiniPool:
    """Prototype of the proposed transport: keep-alive HTTP/1.1 over asyncio streams.

    Plain ``http://`` only (engines under test listen on loopback or a private
    network), requests of one shape (POST JSON, streamed chunked or sized answer).
    A connection goes back to the pool only after its response was read to the
    end; on any error it is closed. ``timeout_s`` bounds each wait for bytes, like
    httpx's read timeout.
    """

    def __init__(self, base_url: str, max_connections: int = 256, timeout_s: float = 600) -> None:
        url = httpx.URL(base_url)
        if url.scheme != "http":
            raise ValueError("MiniPool speaks plain http:// only")
        self.host, self.port = url.host, url.port or 80
        self.host_header = f"{self.host}:{self.port}".encode()
        self.timeout_s = timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout_s)

    async def post_stream(self, path: str, body: bytes, on_data: Callable[[bytes], bool]) -> tuple[int, bytes]:
        """POST ``body``; feed each piece of a 200 answer's body to ``on_data`` (True = stop).

        Returns (status, body of a non-200 answer).
        """
        request = (b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\naccept: */*\r\n"
                   b"content-length: %d\r\n\r\n%s" % (path.encode(), self.host_header, len(body), body))
        loop = asyncio.get_running_loop()
        async with self._slots, asyncio.timeout(self.timeout_s) as deadline:
            # One timer for the whole answer, pushed back as bytes arrive: a read
            # timeout like httpx's, without a timer (or task) per read.
            last = loop.time()

            def alive() -> None:
                nonlocal last
                now = loop.time()
                if now - last > 1.0:
                    deadline.reschedule(now + self.timeout_s)
                    last = now

            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._open()
            reusable = False
            try:
                writer.write(request)  # head and body in one send
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    if not reused:
                        raise
                    writer.close()  # the server had closed this idle connection: once more on a new one
                    reader, writer = await self._open()
                    writer.write(request)
                    head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ", 2)[1])
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                keep = headers.get("connection", "").lower() != "close"
                collected = bytearray()
                stop = False
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        data = await reader.readexactly(size + 2)
                        alive()
                        if size == 0:
                            break
                        if status != 200:
                            collected += data[:-2]
                        elif on_data(data[:-2]):
                            stop = True
                            break
                else:
                    if "content-length" in headers:
                        collected += await reader.readexactly(int(headers["content-length"]))
                    else:
                        collected += await reader.read()
                        keep = False
                    if status == 200:
                        on_data(bytes(collected))
                reusable = keep and not stop
                return status, bytes(collected)
            finally:
                if reusable:
                    self._idle.append((reader, writer))
                else:
                    writer.close()

    async def get_text(self, path: str) -> str:
        async with self._slots:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(b"GET %s HTTP/1.1\r\nhost: %s\r\nconnection: close\r\n\r\n" % (path.encode(), self.host_header))
                data = await asyncio.wait_for(reader.read(), self.timeout_s)
                return data.split(b"\r\n\r\n", 1)[1].decode()
            finally:
                writer.close()

    async def aclose(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


async def mini_send(
    pool: MiniPool, base_url: str, model: str, req: ReplayRequest, max_tokens: int, top_logprobs: int
) -> RequestRecord:
    """Prototype: ``send`` over MiniPool, the same body and the same RequestRecord."""
    rec = RequestRecord(key=req.key, session=req.session, turn=req.turn, phase=req.phase)
    text: list[str] = []
    pending = b""
    loads = json.loads
    t0 = time.perf_counter()

    def on_data(data: bytes) -> bool:
        nonlocal pending
        events = (pending + data).split(b"\n\n") if pending else data.split(b"\n\n")
        pending = events.pop()
        for event in events:
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            if not apply_chunk(rec, loads(event[6:].decode()), text, t0):  # str: skips encoding detection
                return True
        return False

    try:
        status, detail = await pool.post_stream("/v1/chat/completions", _body(req, max_tokens, top_logprobs, model),
                                                on_data)
        if status != 200:
            rec.error = f"HTTP {status}: {_error_message(detail.decode(errors='replace')[:500])}"
    except asyncio.IncompleteReadError:
        # httpx's words for the same event, so crash signatures stay the same.
        rec.error = "RemoteProtocolError: peer closed connection without sending complete message body (incomplete chunked read)"
    except TimeoutError:  # before OSError, its base class
        rec.error = f"ReadTimeout: no bytes from the server for {pool.timeout_s:g} s"
    except (OSError, asyncio.LimitOverrunError, ValueError, IndexError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    rec.text = "".join(text)
    rec.e2e_s = time.perf_counter() - t0
    return rec


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
    """A client under test: how to open its connection holder, and its send function."""

    send: Callable[..., Awaitable[RequestRecord]]
    mini: bool = False

    def open(self, s: Setup, concurrency: int) -> httpx.AsyncClient | MiniPool:
        if self.mini:
            return MiniPool(s.base_url, max_connections=max(256, concurrency))
        # replay()'s settings.
        n = max(256, concurrency)
        return httpx.AsyncClient(timeout=httpx.Timeout(600),
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))


KINDS = {"send": Kind(send), "lean_send": Kind(lean_send), "mini_send": Kind(mini_send, mini=True)}


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
    """The prototypes must record exactly what ``send`` records, failures included."""
    for model in (MODEL, "stub-500", "stub-error-chunk", "stub-drop"):
        recs = {}
        for name, kind in KINDS.items():
            client = kind.open(s, 1)
            try:
                recs[name] = await kind.send(client, s.base_url, model, s.requests[-1], s.max_tokens, s.top_logprobs)
            finally:
                await client.aclose()
        def strip(r: RequestRecord) -> dict:
            return {**r.__dict__, "ttft_s": None, "e2e_s": None}

        ref = strip(recs["send"])
        for name, rec in recs.items():
            if strip(rec) != ref:
                raise RuntimeError(f"{name} records differently from send for model {model}: {strip(rec)} != {ref}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------- driver

ALL = ("send", "lean_send", "mini_send", "replay", "raw", "latency")


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
            for name in ("send", "lean_send", "mini_send"):
                if name in only:
                    r = await throughput(setup, KINDS[name], args.requests, args.concurrency)
                    record(f"{name} req/s", r.per_s)
                    record(f"{name} CPU ms/req", r.cpu_ms)
            if "send" in only and args.low_concurrency:
                # httpcore scans its whole pool on every request start and close: fewer connections, less CPU.
                r = await throughput(setup, KINDS["send"], args.requests, args.low_concurrency)
                record(f"send @{args.low_concurrency} req/s", r.per_s)
                record(f"send @{args.low_concurrency} CPU ms/req", r.cpu_ms)
            if "replay" in only:
                r = await throughput_replay(setup, args.requests, args.concurrency)
                record("replay() req/s", r.per_s)
                record("replay() CPU ms/req", r.cpu_ms)
            if "raw" in only:
                r = await throughput_raw(setup, args.requests, args.concurrency)
                record("raw client req/s", r.per_s)
                record("raw client CPU ms/req", r.cpu_ms)
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
