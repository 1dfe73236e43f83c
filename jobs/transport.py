"""A lean HTTP/1.1 transport for httpx: the replay client's connection layer.

Plugged in through httpx's extension point (``httpx.AsyncClient(transport=LeanTransport())``),
so callers keep httpx's interface: ``client.stream(...)``, ``httpx.Timeout``, httpx's
exceptions. It exists because httpx's default stack (httpcore + h11) cost the replay
5-17 ms of CPU per streamed request: httpcore's pool walks every connection on every
request start and close (quadratic at 256 in flight) and h11 plus httpcore add a layer
of objects per chunk. Numbers: docs/BENCHMARKS.md, "Replay client overhead".

What it does, and all it does:

- plain ``http://``, HTTP/1.1, keep-alive, on an ``asyncio.Protocol`` with its own
  buffer (no StreamReader: a wait, and its timer, only when no bytes are there yet);
  anything else (``https://``) is handed to httpx's own ``AsyncHTTPTransport``;
- one LIFO free list of idle connections per (host, port): taking and returning a
  connection is O(1), nothing scans the pool; an idle connection the server has
  closed is noticed when taken (EOF already seen) and dropped, and a request whose
  reused connection answers nothing at all is sent once more on a new one;
- requests go out head and body in one write, the body with Content-Length;
- responses with Content-Length, chunked transfer-encoding (vLLM streams chunked),
  or neither (read to EOF); a chunked body is yielded as it arrives, all complete
  chunks received so far in one piece;
- a connection goes back to the free list only when its response was read to the
  end and neither side said ``Connection: close``; a response closed early closes
  its socket;
- timeouts from the request's ``timeout`` extension (what ``httpx.Timeout`` puts
  there): connect, each read, each write, and waiting for a connection slot;
- errors raised as httpx's exceptions (``ConnectError``, ``ConnectTimeout``,
  ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``, ...), with httpx's own
  wording where a caller might match on it.

Not supported, on purpose: HTTP/2, proxies, upgrades (101), pipelining, trailers
(read and dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

# h11's words (what httpx raised before), so recorded crash signatures stay comparable.
INCOMPLETE_BODY = "peer closed connection without sending complete message body"
_MAX_HEAD = 64 * 1024  # a longer response head is refused
_HIGH_WATER = 1 << 20  # received and unread bytes above this pause the socket


class _Conn(asyncio.Protocol):
    """One TCP connection: received bytes in ``buf``; ``wait`` for more, with a timeout."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.eof = False
        self.error: OSError | None = None
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False

    # ---- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _HIGH_WATER and not self._paused and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if isinstance(exc, OSError):
            self.error = exc
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # ---- used by the transport
    @property
    def usable(self) -> bool:
        return not self.eof and self.transport is not None and not self.transport.is_closing()

    def consumed(self, n: int) -> None:
        del self.buf[:n]
        if self._paused and len(self.buf) < _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait for more bytes; False at EOF. Raises TimeoutError, or the socket's error."""
        if self.eof:
            if self.error is not None:
                raise self.error
            return False
        loop = asyncio.get_running_loop()
        self._waiter = fut = loop.create_future()
        timer = None if timeout_s is None else loop.call_later(timeout_s, _expire, fut)
        try:
            await fut
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if self.eof and self.error is not None:
            raise self.error
        return True

    async def write(self, data: bytes, timeout_s: float | None) -> None:
        assert self.transport is not None
        self.transport.write(data)  # head and body in one send
        if self._writable is not None:  # the kernel did not take it all: wait for room
            async with asyncio.timeout(timeout_s):
                await self._writable
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over asyncio, at most ``max_connections`` open at once."""

    def __init__(self, max_connections: int = 256) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._fallback: httpx.AsyncHTTPTransport | None = None
        self._closed = False
        self.opened = 0  # connections opened so far: lets tests and benchmarks see reuse

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport()
            return await self._fallback.handle_async_request(request)
        timeout = request.extensions.get("timeout") or {}
        host, port = request.url.host, request.url.port or 80
        data = await _encode(request)
        try:
            async with asyncio.timeout(timeout.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection slot in time", request=request) from None
        try:
            conn, reused = await self._take(host, port, timeout.get("connect"), request)
            try:
                head = await _exchange(conn, data, timeout, request)
            except _NothingBack:
                conn.close()
                if not reused:
                    raise _no_answer(request) from None
                # The server had closed this idle connection: once more on a fresh one.
                conn, _ = await self._take(host, port, timeout.get("connect"), request, fresh=True)
                try:
                    head = await _exchange(conn, data, timeout, request)
                except _NothingBack:
                    conn.close()
                    raise _no_answer(request) from None
        except BaseException:
            self._slots.release()
            raise
        status, reason, headers, version = head
        stream = _Body(self, (host, port), conn, request, status, headers, version, timeout.get("read"))
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": version, "reason_phrase": reason})

    async def _take(self, host: str, port: int, connect_s: float | None, request: httpx.Request,
                    fresh: bool = False) -> tuple[_Conn, bool]:
        idle = self._idle.get((host, port))
        while idle and not fresh:
            conn = idle.pop()
            if conn.usable and not conn.buf:
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(connect_s):
                _, conn = await asyncio.get_running_loop().create_connection(_Conn, host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} took over {connect_s:g} s",
                                       request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        self.opened += 1
        return conn, False

    def _release(self, key: tuple[str, int], conn: _Conn, reusable: bool) -> None:
        self._slots.release()
        if reusable and not self._closed and conn.usable:
            self._idle.setdefault(key, []).append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


class _NothingBack(Exception):
    """The connection closed before a single byte of the answer: safe to send again."""


def _no_answer(request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)


async def _encode(request: httpx.Request) -> bytes:
    try:
        body = request.content  # httpx reads bytes/json/form bodies when the request is built
    except httpx.RequestNotRead:
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), request.url.raw_path)]
    for name, value in request.headers.raw:
        if name.lower() not in (b"content-length", b"transfer-encoding"):
            lines.append(b"%s: %s" % (name, value))
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


Head = tuple[int, bytes, list[tuple[bytes, bytes]], bytes]


async def _exchange(conn: _Conn, data: bytes, timeout: dict, request: httpx.Request) -> Head:
    try:
        await conn.write(data, timeout.get("write"))
    except TimeoutError:
        conn.close()
        raise httpx.WriteTimeout(f"writing the request took over {timeout.get('write'):g} s", request=request) from None
    except OSError as exc:
        conn.close()
        raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc
    return await _read_head(conn, timeout.get("read"), request)


async def _read_head(conn: _Conn, read_s: float | None, request: httpx.Request) -> Head:
    while True:
        start = 0
        while (end := conn.buf.find(b"\r\n\r\n", start)) < 0:
            if len(conn.buf) > _MAX_HEAD:
                conn.close()
                raise httpx.RemoteProtocolError("response head too long", request=request)
            start = max(0, len(conn.buf) - 3)
            try:
                more = await conn.wait(read_s)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout(f"no answer within {read_s:g} s", request=request) from None
            except OSError as exc:
                conn.close()
                if not conn.buf and isinstance(exc, ConnectionResetError):
                    raise _NothingBack from None
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
            if not more:
                if not conn.buf:
                    raise _NothingBack
                conn.close()
                raise httpx.RemoteProtocolError("Server disconnected in the middle of the response head.",
                                                request=request)
        lines = bytes(conn.buf[:end]).split(b"\r\n")
        conn.consumed(end + 4)
        try:
            version, code, *rest = lines[0].split(b" ", 2)
            status = int(code)
            if not version.startswith(b"HTTP/1.") or not 100 <= status <= 999:
                raise ValueError
            headers = []
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if not sep or not name or name != name.strip():
                    raise ValueError
                headers.append((name, value.strip()))
        except ValueError:
            conn.close()
            raise httpx.RemoteProtocolError(f"malformed response head: {lines[0][:80]!r}", request=request) from None
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and friends: the real answer follows
        return status, rest[0] if rest else b"", headers, version


class _Body(httpx.AsyncByteStream):
    """A response body straight off the socket; returns the connection when fully read."""

    def __init__(self, pool: LeanTransport, key: tuple[str, int], conn: _Conn, request: httpx.Request, status: int,
                 headers: list[tuple[bytes, bytes]], version: bytes, read_s: float | None) -> None:
        self.pool, self.key, self.conn, self.request, self.read_s = pool, key, conn, request, read_s
        self.length: int | None = None
        self.chunked = False
        keep = version == b"HTTP/1.1"
        for name, value in headers:
            name = name.lower()
            if name == b"content-length":
                try:
                    self.length = int(value)
                except ValueError:
                    self.length = -1
            elif name == b"transfer-encoding":
                self.chunked = value.lower().endswith(b"chunked")
            elif name == b"connection":
                keep = keep and b"close" not in value.lower()
        if self.length is not None and self.length < 0:
            self.length = None
            keep = False  # unparseable: read to EOF and never reuse
        if request.headers.get("connection", "").lower() == "close":
            keep = False
        if request.method == "HEAD" or status in (204, 304):
            self.length, self.chunked = 0, False
        elif not self.chunked and self.length is None:
            keep = False  # the body ends when the server closes
        self.keep = keep
        self.done = False
        self.released = False

    async def _more(self) -> bool:
        try:
            return await self.conn.wait(self.read_s)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no bytes from the server for {self.read_s:g} s", request=self.request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self.request) from exc

    def _incomplete(self, what: str) -> httpx.RemoteProtocolError:
        return httpx.RemoteProtocolError(f"{INCOMPLETE_BODY} ({what})", request=self.request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self.conn
        if self.chunked:
            async for data in self._chunks():
                yield data
        elif self.length is not None:
            left = self.length
            while left:
                if not conn.buf and not await self._more():
                    raise self._incomplete("incomplete read of a sized body")
                data = bytes(conn.buf[:left])
                conn.consumed(len(data))
                left -= len(data)
                yield data
        else:
            while conn.buf or await self._more():
                data = bytes(conn.buf)
                conn.consumed(len(data))
                yield data
        self.done = True
        await self.aclose()

    async def _chunks(self) -> AsyncIterator[bytes]:
        conn = self.conn
        while True:
            buf = conn.buf
            out = []
            pos = 0
            last = False
            # Every complete chunk received so far, in one piece.
            while (eol := buf.find(b"\r\n", pos)) >= 0:
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                    if size < 0:
                        raise ValueError
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunk size line: {bytes(buf[pos:eol][:40])!r}",
                                                    request=self.request) from None
                if size == 0:
                    last = True
                    pos = eol + 2
                    break
                end = eol + 2 + size
                if len(buf) < end + 2:
                    break
                if buf[end:end + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF", request=self.request)
                out.append(buf[eol + 2:end])
                pos = end + 2
            if pos:
                conn.consumed(pos)
            if out:
                yield b"".join(out)
            if last:
                await self._trailers()
                return
            if len(conn.buf) > _MAX_HEAD and conn.buf.find(b"\r\n") < 0:
                raise httpx.RemoteProtocolError("chunk size line too long", request=self.request)
            if not await self._more():
                raise self._incomplete("incomplete chunked read")

    async def _trailers(self) -> None:
        # After the last chunk: optional trailer lines, then an empty line.
        conn = self.conn
        while True:
            if conn.buf.startswith(b"\r\n"):
                conn.consumed(2)
                break
            end = conn.buf.find(b"\r\n\r\n")
            if end >= 0:
                conn.consumed(end + 4)
                break
            if not await self._more():
                raise self._incomplete("incomplete chunked read")
        if conn.buf:
            self.keep = False  # bytes nobody asked for: this connection's framing is not to be trusted

    async def aclose(self) -> None:
        if not self.released:
            self.released = True
            self.pool._release(self.key, self.conn, self.done and self.keep)
