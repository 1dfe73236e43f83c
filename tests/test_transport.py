"""The replay's HTTP layer (``jobs.replay.client_session``, aiohttp) on the wire, against a raw server.

Not an engine test: the server below speaks HTTP/1.1 bytes written per test (chunked
in odd pieces, sized, malformed, silent, closing) and counts the TCP connections it
accepted, so keep-alive reuse, closing and the connection limit are checked from the
server's side, and every failure is checked to end as the request's ``error``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Self

import pytest

from vmatrix.jobs import replay as replay_mod
from vmatrix.jobs.replay import client_session, replay, send
from vmatrix.records import RequestRecord, Transcript
from vmatrix.workload import ReplayRequest, Workload

# (request number on this connection, request head, request body, writer) -> keep the connection open?
Handler = Callable[[int, bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]

REQ = ReplayRequest(key="s0/0", session="s0", turn=0, phase="a", messages=(("user", "one two"),))


class Server:
    """HTTP/1.1 on 127.0.0.1: reads requests (Content-Length bodies) and lets ``handler`` answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open = self.most_open = 0
        self.closed_by_client = 0
        self.paths: list[bytes] = []
        self.readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}  # lets a handler watch for a hang-up
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self.readers[writer] = reader
        n = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1  # the client hung up between requests
                    return
                self.paths.append(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                if not await self.handler(n, head, body, writer):
                    return
                await writer.drain()
                n += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            self.open -= 1
            writer.close()


def event(i: int, last: int = -1, eol: bytes = b"\n") -> bytes:
    """The i-th token's SSE event in the chat shape (token id 100 + i)."""
    item = {"token": f"token_id:{100 + i}", "logprob": -0.1, "top_logprobs": [{"logprob": -0.1}, {"logprob": -0.6}]}
    choice = {"index": 0, "delta": {"content": f" w{i}"}, "logprobs": {"content": [item]},
              "finish_reason": "length" if i == last else None}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + eol + eol


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def stream(n: int, eol: bytes = b"\n") -> bytes:
    return SSE_HEAD + chunked(*(event(i, n - 1, eol) for i in range(n)), b"data: [DONE]" + eol + eol)


def sized(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def answers(wire: bytes, keep: bool = True) -> Handler:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(wire)
        return keep

    return handler


def sends(handler: Handler, count: int = 1, timeout_s: float = 5,
          concurrent: bool = False) -> tuple[list[RequestRecord], Server]:
    async def go() -> tuple[list[RequestRecord], Server]:
        async with Server(handler) as s, client_session(timeout_s) as client:
            one = lambda: send(client, s.url, "m", REQ, 4, 2)
            if concurrent:
                recs = list(await asyncio.gather(*(one() for _ in range(count))))
            else:
                recs = [await one() for _ in range(count)]
            await asyncio.sleep(0.05)  # let the server see what the client closed
            return recs, s

    return asyncio.run(asyncio.wait_for(go(), 20))


def clean(rec: RequestRecord, n: int = 4) -> bool:
    return rec.error is None and rec.token_ids == [100 + i for i in range(n)] and rec.finish_reason == "length"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_a_stream_arriving_in_odd_pieces_is_reassembled(eol: bytes) -> None:
    # Cut everywhere: inside chunk size lines, SSE lines, JSON and CRLFs; one chunk has an extension.
    wire = stream(6, eol).replace(b"\r\n", b";ext=1\r\n", 1)

    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        for i in range(0, len(wire), 37):
            w.write(wire[i:i + 37])
            await w.drain()
            await asyncio.sleep(0)
        return True

    (rec,), _ = sends(handler)
    assert rec.error is None and rec.token_ids == [100 + i for i in range(6)]
    assert rec.text == "".join(f" w{i}" for i in range(6)) and rec.margins == pytest.approx([0.5] * 6)


def test_a_last_event_without_its_newline_is_read() -> None:
    body = b"".join(event(i, 3) for i in range(3)) + event(3, 3).rstrip(b"\n")
    (rec,), _ = sends(answers(sized(body, b"content-type: text/event-stream\r\n")))
    assert clean(rec)


def test_keep_alive_reuses_one_connection() -> None:
    recs, s = sends(answers(stream(4)), count=3)
    assert all(clean(r) for r in recs)
    assert s.connections == 1


def test_the_connection_limit_holds_and_requests_wait_for_a_free_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_mod, "MAX_CONNECTIONS", 2)

    async def slow(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)  # every request in flight a while: they overlap
        w.write(stream(4))
        return True

    recs, s = sends(slow, count=6, concurrent=True)
    assert all(clean(r) for r in recs)
    assert s.most_open == 2 and s.connections == 2


def test_connection_close_from_the_server_is_respected() -> None:
    # The server is slow to hang up: only the header says this connection is done.
    recs, s = sends(answers(stream(4).replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1)), count=2)
    assert all(clean(r) for r in recs) and s.connections == 2


def test_a_server_closing_an_idle_connection_is_survived() -> None:
    recs, s = sends(answers(stream(4), keep=False), count=3)  # no "connection: close", but hangs up after each
    assert all(clean(r) for r in recs) and s.connections == 3


def test_an_error_event_ends_the_request_at_once_and_does_not_poison_the_pool() -> None:
    error = b'data: {"error": {"message": "engine: out of blocks", "code": 500}}\n\n'

    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if s.connections == 1 and n == 0:
            w.write(SSE_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (event(0), event(1), error)))
            await w.drain()
            if await s.readers[w].read() == b"":  # the stream never ends: the client must hang up
                raise ConnectionError("client hung up mid-stream")
            return False
        w.write(stream(4))
        return True

    async def go() -> tuple[RequestRecord, int, RequestRecord]:
        async with Server(handler) as server, client_session(30) as client:
            nonlocal s
            s = server
            first = await send(client, s.url, "m", REQ, 4, 2)
            for _ in range(100):
                if s.closed_by_client:
                    break
                await asyncio.sleep(0.01)
            closed = s.closed_by_client
            return first, closed, await send(client, s.url, "m", REQ, 4, 2)

    s: Server
    first, closed, second = asyncio.run(asyncio.wait_for(go(), 10))  # well under the 30 s read timeout
    assert first.error == "engine: out of blocks" and first.token_ids == [100, 101] and first.finish_reason is None
    assert closed == 1  # the server saw the abandoned stream end
    assert clean(second) and s.connections == 2  # a fresh connection, and a clean answer on it


@pytest.mark.parametrize("stall", ["head", "body"])
def test_a_silent_server_is_a_timeout_error_on_the_request(stall: str) -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if stall == "body":
            w.write(SSE_HEAD + b"%x\r\n%s\r\n" % (len(event(0)), event(0)))
        await asyncio.sleep(5)
        return False

    (rec,), _ = sends(handler, timeout_s=0.2)
    assert rec.error is not None and "Timeout" in rec.error.split(":")[0]
    assert rec.token_ids == ([100] if stall == "body" else [])


@pytest.mark.parametrize(("wire", "words"), [
    (SSE_HEAD + b"zz\r\nhello\r\n0\r\n\r\n", "ClientResponseError: Invalid character in chunk size: b'zz' ^"),
    (SSE_HEAD + b"5\r\nhelloXX0\r\n\r\n", "ClientResponseError: Expected LF after chunk data: b'helloXX0' ^"),
    (SSE_HEAD + b"5\r\nhel", "ClientPayloadError: Response payload is not completed"),
    (b"HTTP/1.1 2OO OK\r\n\r\n", "ClientResponseError: Bad status line: Invalid status code: b'HTTP/1.1 2OO OK' ^"),
    (b"", "ServerDisconnectedError"),
])
def test_bad_framing_is_an_error_on_the_request(wire: bytes, words: str) -> None:
    (rec,), _ = sends(answers(wire, keep=False))
    assert rec.error is not None and rec.error.startswith(words), rec.error
    assert "\n" not in rec.error and "127.0.0.1" not in rec.error  # one line, the same whatever the engine's port
    assert rec.token_ids == [] and rec.e2e_s is not None


def _workload() -> Workload:
    reqs = tuple(ReplayRequest(key=f"s{i}/0", session=f"s{i}", turn=0, phase="a", messages=(("user", "x"),))
                 for i in range(2))
    return Workload(name="w", phases=(("a", reqs),), max_tokens=4, top_logprobs=2)


@pytest.mark.parametrize("metrics", [b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n", b""])
def test_a_failing_metrics_endpoint_loses_the_counters_not_the_replay(metrics: bytes) -> None:
    ok = b'vllm:prefix_cache_queries_total{engine="0"} 3.0\n'

    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if head.startswith(b"GET /metrics"):
            w.write(metrics)
            return bool(metrics)
        w.write(stream(4))
        return True

    async def go(h: Handler) -> Transcript:
        async with Server(h) as s:
            return await replay(s.url, "m", _workload(), timeout_s=5)

    transcript = asyncio.run(asyncio.wait_for(go(handler), 20))
    assert all(clean(r) for r in transcript.requests) and len(transcript.requests) == 2
    assert transcript.metrics == {}

    async def counting(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if head.startswith(b"GET /metrics"):
            w.write(sized(ok.replace(b"3.0", b"%d.0" % (3 * counting.calls))))  # type: ignore[attr-defined]
            counting.calls += 1  # type: ignore[attr-defined]
            return True
        w.write(stream(4))
        return True

    counting.calls = 1  # type: ignore[attr-defined]
    # The same replay with /metrics answering: a delta (the scrape works over the replay's session).
    assert asyncio.run(asyncio.wait_for(go(counting), 20)).metrics == {"a": {"vllm:prefix_cache_queries_total": 3.0}}
