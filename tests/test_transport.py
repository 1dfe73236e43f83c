"""jobs.transport.LeanTransport against a real local asyncio HTTP server started here.

A transport test, not an engine test: the server below speaks raw HTTP/1.1 bytes
written per test (chunked, sized, malformed, silent, closing), and counts the TCP
connections it accepted, so reuse and closing are checked from the server's side.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Self

import httpx
import pytest

from jobs.replay import replay_transport
from jobs.transport import LeanTransport

# (request number on this connection, request head, request body, writer) -> keep the connection open?
Handler = Callable[[int, bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]


READERS: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}  # lets a handler watch for the client hanging up


class Server:
    """HTTP/1.1 on 127.0.0.1: reads requests (Content-Length bodies) and lets ``handler`` answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_client = 0
        self.bodies: list[bytes] = []
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
        READERS[writer] = reader
        n = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1  # the client hung up between requests
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.bodies.append(body)
                if not await self.handler(n, head, body, writer):
                    return
                await writer.drain()
                n += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            writer.close()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def sized(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


def client(**timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=LeanTransport(), timeout=httpx.Timeout(5, **timeout))


def test_chunked_stream_arriving_in_pieces_is_reassembled() -> None:
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(40)]
    wire = CHUNKED_HEAD + chunked(*events[:20]) [:-5] + b"1;ext=1\r\nx\r\n" + chunked(*events[20:])

    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        for i in range(0, len(wire), 37):  # cut everywhere: inside size lines, data and CRLFs
            w.write(wire[i:i + 37])
            await w.drain()
            await asyncio.sleep(0)
        return True

    async def go() -> tuple[bytes, int]:
        async with Server(handler) as s, client() as c:
            async with c.stream("POST", s.url + "/x", content=b"hello") as r:
                assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
                got = b"".join([part async for part in r.aiter_raw()])
            return got, len(s.bodies[0])

    got, sent = run(go())  # type: ignore[misc]
    assert got == b"".join(events[:20]) + b"x" + b"".join(events[20:])
    assert sent == 5


def test_content_length_body_and_request_body_arrive_whole() -> None:
    payload = bytes(range(256)) * 1000  # bigger than one read

    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(sized(payload[:len(body)]))
        return True

    async def go() -> tuple[httpx.Response, Server]:
        async with Server(handler) as s, client() as c:
            r = await c.post(s.url, content=payload)
            return r, s

    r, s = run(go())  # type: ignore[misc]
    assert r.status_code == 200 and r.content == payload and s.bodies == [payload]


def test_keep_alive_reuses_one_connection() -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(CHUNKED_HEAD + chunked(b"a%d" % n))
        return True

    async def go() -> tuple[list[bytes], int, int]:
        transport = LeanTransport()
        async with Server(handler) as s, httpx.AsyncClient(transport=transport) as c:
            texts = [(await c.post(s.url, json={"i": i})).content for i in range(3)]
            return texts, s.connections, transport.opened

    texts, server_conns, opened = run(go())  # type: ignore[misc]
    assert texts == [b"a0", b"a1", b"a2"]
    assert server_conns == 1 and opened == 1


def test_connection_close_from_the_server_is_respected() -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(sized(b"bye", b"connection: close\r\n"))
        return True  # the server is slow to hang up: only the header says this connection is done

    async def go() -> tuple[list[bytes], int]:
        async with Server(handler) as s, client() as c:
            texts = [(await c.get(s.url)).content for _ in range(2)]
            return texts, s.connections

    texts, conns = run(go())  # type: ignore[misc]
    assert texts == [b"bye", b"bye"] and conns == 2


def test_connection_close_from_the_client_is_respected() -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(sized(b"ok"))
        return True  # the server would keep it

    async def go() -> tuple[int, int]:
        async with Server(handler) as s, client() as c:
            for _ in range(2):
                assert (await c.get(s.url, headers={"connection": "close"})).content == b"ok"
            await asyncio.sleep(0.05)
            return s.connections, s.closed_by_client

    assert run(go()) == (2, 2)


def test_server_closing_an_idle_connection_is_survived() -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(sized(b"ok"))  # no "connection: close", but hangs up after the answer
        await w.drain()
        return False

    async def go() -> tuple[list[bytes], int]:
        async with Server(handler) as s, client() as c:
            texts = []
            for _ in range(3):
                texts.append((await c.post(s.url, content=b"x")).content)
            return texts, s.connections

    texts, conns = run(go())  # type: ignore[misc]
    assert texts == [b"ok"] * 3 and conns == 3


def test_early_close_closes_the_socket_and_does_not_poison_the_pool() -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if n == 0 and body == b"long":
            w.write(CHUNKED_HEAD + b"5\r\nfirst\r\n")
            await w.drain()
            if await READERS[w].read() == b"":  # the rest is never sent: the client must hang up
                raise ConnectionError("client hung up mid-stream")
            return False
        w.write(CHUNKED_HEAD + chunked(b"short"))
        return True

    async def go() -> tuple[bytes, bytes, int, int]:
        async with Server(handler) as s, client() as c:
            async with c.stream("POST", s.url, content=b"long") as r:
                async for part in r.aiter_raw():
                    first = part
                    break
            for _ in range(100):
                if s.closed_by_client:
                    break
                await asyncio.sleep(0.01)
            closed = s.closed_by_client
            second = (await c.post(s.url, content=b"again")).content
            return first, second, closed, s.connections

    first, second, closed, conns = run(go())  # type: ignore[misc]
    assert first == b"first"
    assert closed == 1  # the server saw the abandoned connection end
    assert second == b"short" and conns == 2  # a fresh connection, and a clean answer on it


def test_connect_error_is_httpx_connect_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def go() -> None:
        async with client() as c:
            await c.get(f"http://127.0.0.1:{port}/")

    with pytest.raises(httpx.ConnectError):
        run(go())


@pytest.mark.parametrize("stall", ["head", "body"])
def test_silent_server_is_httpx_read_timeout(stall: str) -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if stall == "body":
            w.write(CHUNKED_HEAD + b"3\r\nabc\r\n")
        await asyncio.sleep(5)
        return False

    async def go() -> None:
        async with Server(handler) as s, client(read=0.2) as c, c.stream("GET", s.url) as r:
            await r.aread()

    with pytest.raises(httpx.ReadTimeout):
        run(go())


@pytest.mark.parametrize(("wire", "words"), [
    (CHUNKED_HEAD + b"zz\r\nhello\r\n0\r\n\r\n", "malformed chunk size"),
    (CHUNKED_HEAD + b"5\r\nhelloXX0\r\n\r\n", "not followed by CRLF"),
    (CHUNKED_HEAD + b"5\r\nhel", "incomplete chunked read"),
    (b"HTTP/1.1 2OO OK\r\n\r\n", "malformed response head"),
    (b"", "without sending a response"),
])
def test_bad_framing_is_remote_protocol_error(wire: bytes, words: str) -> None:
    async def handler(n: int, head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(wire)
        return False

    async def go() -> None:
        async with Server(handler) as s, client() as c:
            await c.get(s.url)

    with pytest.raises(httpx.RemoteProtocolError, match=words):
        run(go())


def test_replay_transport_choice() -> None:
    assert replay_transport("httpx") is None  # httpx's own stack
    assert isinstance(replay_transport("lean"), LeanTransport)
    with pytest.raises(ValueError, match="VMATRIX_REPLAY_TRANSPORT: unknown replay transport 'h2'"):
        replay_transport("h2")


def test_env_var_picks_the_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_REPLAY_TRANSPORT", "httpx")
    assert replay_transport() is None
    monkeypatch.delenv("VMATRIX_REPLAY_TRANSPORT")
    assert isinstance(replay_transport(), LeanTransport)
