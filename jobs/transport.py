"""A lean HTTP/1.1 transport for httpx: the replay client's connection layer.

Plugged in through httpx's extension point (``httpx.AsyncClient(transport=LeanTransport())``),
so callers keep httpx's interface: ``client.stream(...)``, ``httpx.Timeout``, httpx's
exceptions. It exists because httpx's default stack (httpcore + h11) cost the replay
5-17 ms of CPU per streamed request: httpcore's pool walks every connection on every
request start and close (quadratic at 256 in flight) and h11 plus httpcore add a layer
of objects per chunk. Numbers: docs/BENCHMARKS.md, "Replay client overhead".

What it does, and all it does:

- plain ``http://``, HTTP/1.1, keep-alive; anything else (``https://``) is handed to
  httpx's own ``AsyncHTTPTransport``;
- one LIFO free list of idle connections per (host, port): taking and returning a
  connection is O(1), nothing scans the pool; an idle connection the server has
  closed is noticed when taken (its reader saw EOF) and dropped, and a request whose
  reused connection answers nothing at all is sent once more on a new one;
- requests go out head and body in one write, the body with Content-Length;
- responses with Content-Length, chunked transfer-encoding (vLLM streams chunked),
  or neither (read to EOF); a chunked body is yielded a network read at a time, all
  complete chunks of a read together;
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
_MAX_HEAD = 64 * 1024
_READ = 65536

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive over asyncio streams, at most ``max_connections`` open at once."""

    def __init__(self, max_connections: int = 256) -> None:
        self._idle: dict[tuple[str, int], list[Conn]] = {}
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
        head, body = await _encode(request)
        try:
            async with asyncio.timeout(timeout.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection slot in time", request=request) from None
        try:
            conn, reused = await self._take(host, port, timeout.get("connect"), request)
            try:
                status, reason, headers, version = await _exchange(conn, head + body, timeout, request)
            except _NothingBack:
                conn[1].close()
                if not reused:
                    raise _no_answer(request) from None
                # The server had closed this idle connection: once more on a fresh one.
                conn, _ = await self._take(host, port, timeout.get("connect"), request, fresh=True)
                try:
                    status, reason, headers, version = await _exchange(conn, head + body, timeout, request)
                except _NothingBack:
                    conn[1].close()
                    raise _no_answer(request) from None
        except BaseException:
            self._slots.release()
            raise
        stream = _Body(self, (host, port), conn, request, status, headers, version, timeout.get("read"))
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason})

    async def _take(self, host: str, port: int, connect_s: float | None, request: httpx.Request,
                    fresh: bool = False) -> tuple[Conn, bool]:
        idle = self._idle.get((host, port))
        while idle and not fresh:
            conn = idle.pop()
            if conn[0].at_eof() or conn[1].is_closing():
                conn[1].close()
                continue
            return conn, True
        try:
            async with asyncio.timeout(connect_s):
                conn = await asyncio.open_connection(host, port, limit=_MAX_HEAD)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} took over {connect_s:g} s",
                                       request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        self.opened += 1
        return conn, False

    def _release(self, key: tuple[str, int], conn: Conn, reusable: bool) -> None:
        self._slots.release()
        if reusable and not self._closed:
            self._idle.setdefault(key, []).append(conn)
        else:
            conn[1].close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


class _NothingBack(Exception):
    """The connection closed before a single byte of the answer: safe to send again."""


async def _encode(request: httpx.Request) -> tuple[bytes, bytes]:
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
    return b"\r\n".join(lines) + b"\r\n\r\n", body


def _no_answer(request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)


async def _exchange(conn: Conn, data: bytes, timeout: dict, request: httpx.Request
                    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
    await _write(conn, data, timeout.get("write"), request)
    return await _read_head(conn, timeout.get("read"), request)


async def _write(conn: Conn, data: bytes, write_s: float | None, request: httpx.Request) -> None:
    writer = conn[1]
    try:
        writer.write(data)
        if writer.transport.get_write_buffer_size() > _READ:  # drain only when the kernel did not take it all
            async with asyncio.timeout(write_s):
                await writer.drain()
    except TimeoutError:
        writer.close()
        raise httpx.WriteTimeout(f"writing the request took over {write_s:g} s", request=request) from None
    except OSError as exc:
        writer.close()
        raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc


async def _read_head(conn: Conn, read_s: float | None, request: httpx.Request
                     ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
    reader, writer = conn
    while True:
        try:
            async with asyncio.timeout(read_s):
                raw = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            writer.close()
            raise httpx.ReadTimeout(f"no answer within {read_s:g} s", request=request) from None
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _NothingBack from None
            writer.close()
            raise httpx.RemoteProtocolError("Server disconnected in the middle of the response head.",
                                            request=request) from None
        except asyncio.LimitOverrunError:
            writer.close()
            raise httpx.RemoteProtocolError("response head too long", request=request) from None
        except OSError as exc:
            writer.close()
            if isinstance(exc, ConnectionResetError):
                raise _NothingBack from None
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        lines = raw[:-4].split(b"\r\n")
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
            writer.close()
            raise httpx.RemoteProtocolError(f"malformed response head: {lines[0][:80]!r}", request=request) from None
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and friends: the real answer follows
        return status, rest[0] if rest else b"", headers, version


class _Body(httpx.AsyncByteStream):
    """A response body straight off the socket; returns the connection when fully read."""

    def __init__(self, pool: LeanTransport, key: tuple[str, int], conn: Conn, request: httpx.Request, status: int,
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

    async def _read(self, n: int = _READ) -> bytes:
        reader, writer = self.conn
        try:
            async with asyncio.timeout(self.read_s):
                return await reader.read(n)
        except TimeoutError:
            raise httpx.ReadTimeout(f"no bytes from the server for {self.read_s:g} s", request=self.request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self.request) from exc

    def _incomplete(self, what: str) -> httpx.RemoteProtocolError:
        return httpx.RemoteProtocolError(f"{INCOMPLETE_BODY} ({what})", request=self.request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.chunked:
            async for data in self._chunks():
                yield data
        elif self.length is not None:
            left = self.length
            while left:
                data = await self._read(min(left, _READ))
                if not data:
                    raise self._incomplete("incomplete read of a sized body")
                left -= len(data)
                yield data
        else:
            while data := await self._read():
                yield data
        self.done = True
        await self.aclose()

    async def _chunks(self) -> AsyncIterator[bytes]:
        buf = b""
        pos = 0
        while True:
            out = []
            # Every complete chunk already read, in one piece: one read, one yield.
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                    if size < 0:
                        raise ValueError
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunk size line: {buf[pos:eol][:40]!r}",
                                                    request=self.request) from None
                if size == 0:
                    if out:
                        yield b"".join(out)
                    await self._trailers(buf[eol + 2:])
                    return
                end = eol + 2 + size
                if len(buf) < end + 2:
                    break
                if buf[end:end + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF", request=self.request)
                out.append(buf[eol + 2:end])
                pos = end + 2
            if out:
                yield b"".join(out)
            buf = buf[pos:]
            pos = 0
            if len(buf) > 4 * _MAX_HEAD and buf.find(b"\r\n") < 0:
                raise httpx.RemoteProtocolError("chunk size line too long", request=self.request)
            data = await self._read()
            if not data:
                raise self._incomplete("incomplete chunked read")
            buf += data

    async def _trailers(self, buf: bytes) -> None:
        # After the last chunk: optional trailer lines, then an empty line.
        while True:
            if buf.startswith(b"\r\n"):
                rest = buf[2:]
                break
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                rest = buf[end + 4:]
                break
            data = await self._read()
            if not data:
                raise self._incomplete("incomplete chunked read")
            buf += data
        if rest:
            self.keep = False  # bytes nobody asked for: this connection's framing is not to be trusted

    async def aclose(self) -> None:
        if not self.released:
            self.released = True
            self.pool._release(self.key, self.conn, self.done and self.keep)
