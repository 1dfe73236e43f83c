"""A stub that streams a fixed, recorded-format chat completion. NOT an engine.

It exists for two things only: the replay client's overhead benchmark
(benchmarks/replay_client.py) and the client's unit test (tests/test_replay_client.py).
It runs no model and computes nothing: every answer is the same deterministic
token sequence (``token(i)``), framed exactly as vLLM streams a chat completion
with ``logprobs``, ``top_logprobs`` and ``return_tokens_as_token_ids`` (SSE
``data:`` events over chunked HTTP/1.1, ``token_id:N`` tokens, finish_reason on
the last token, a usage chunk, ``[DONE]``). Results against it say how fast the
*client* is, never anything about a serving stack.

Hand-written HTTP/1.1 on an asyncio Protocol, standard library only, so the stub
costs the benchmark's CPU as little as possible and needs nothing installed.
The ``model`` field picks a behaviour: ``stub`` streams normally, ``stub-500``
answers HTTP 500, ``stub-error-chunk`` sends an error event mid-stream,
``stub-drop`` closes the connection mid-stream, ``stub-tokenize-400`` refuses to
tokenize. ``/v1/completions`` streams the same tokens in the completions shape, and
``/tokenize`` answers one made-up id per word of the messages.

    python benchmarks/stub_stream_server.py --port 8765 --max-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from dataclasses import dataclass, field
from typing import Self

HOST = "127.0.0.1"  # loopback only: this must never be reachable from elsewhere
MAX_TOKENS = 4096


def token(i: int) -> tuple[int, float, float]:
    """(token id, logprob, top-1 minus top-2 margin) of the i-th streamed token."""
    return 1000 + (i * 7) % 500, round(0.0 - 0.05 * (i % 5), 4), round(0.25 + 0.5 * (i % 3), 4)


def prompt_tokens(body: dict) -> int:
    """What the stub reports as usage.prompt_tokens: whitespace words of the messages
    (a completion's prompt: its token ids, as ``/tokenize`` gave them)."""
    if isinstance(body.get("prompt"), list):
        return len(body["prompt"])
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))


def tokenize(body: dict) -> list[int]:
    """What the stub's ``/tokenize`` answers: one id per whitespace word of the messages."""
    return [100 + len(word) for m in body.get("messages", []) for word in str(m.get("content", "")).split()]


def _event(obj: object) -> bytes:
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _head(model: str) -> dict:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": model}


def _token_event(i: int, n: int, top: int, model: str) -> bytes:
    tid, lp, margin = token(i)
    tops = [{"token": f"token_id:{tid}", "logprob": lp, "bytes": [119]}]
    tops += [{"token": f"token_id:{tid + k}", "logprob": round(lp - margin - 0.5 * (k - 1), 4), "bytes": [120]}
             for k in range(1, top)]
    item = {"token": f"token_id:{tid}", "logprob": lp, "bytes": [119], "top_logprobs": tops}
    choice = {"index": 0, "delta": {"content": f" w{i}"}, "logprobs": {"content": [item]},
              "finish_reason": "length" if i == n - 1 else None}
    if i == n - 1:
        choice["stop_reason"] = None
    return _event({**_head(model), "choices": [choice]})


def _completion_event(i: int, n: int, top: int, model: str) -> bytes:
    """The i-th token as ``/v1/completions`` streams it: parallel lists, top logprobs as a dict."""
    tid, lp, margin = token(i)
    tops = {f"token_id:{tid}": lp} | {f"token_id:{tid + k}": round(lp - margin - 0.5 * (k - 1), 4) for k in range(1, top)}
    choice = {"index": 0, "text": f" w{i}",
              "logprobs": {"text_offset": [3 * i], "token_logprobs": [lp], "tokens": [f"token_id:{tid}"],
                           "top_logprobs": [tops]},
              "finish_reason": "length" if i == n - 1 else None, "stop_reason": None}
    return _event({"id": "cmpl-stub", "object": "text_completion", "created": 0, "model": model, "choices": [choice]})


@dataclass
class StubServer:
    """The stub on 127.0.0.1; ``port=0`` picks a free port (see ``.port`` after start)."""

    port: int = 0
    first_token_delay_s: float = 0.0
    token_delay_s: float = 0.0
    requests: int = 0
    queries: int = 0
    # What it was asked, in order ("/pause", "/resume", or a request's session), and
    # whether it holds streams: a paused stub answers a completion's headers and sends its
    # tokens once resumed, as vLLM's scheduler pause (mode keep) does.
    log: list[str] = field(default_factory=list)
    pausable: bool = True
    _resumed: asyncio.Event | None = None
    _server: asyncio.AbstractServer | None = None
    _cache: dict[tuple[int, int, str], list[bytes]] = field(default_factory=dict)

    async def start(self) -> Self:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Conn(self), HOST, self.port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def token_events(self, n: int, top: int, model: str, completions: bool = False) -> list[bytes]:
        key = (n, top, model, completions)
        if key not in self._cache:
            if completions:  # no role chunk on /v1/completions
                self._cache[key] = [_completion_event(i, n, top, model) for i in range(n)]
            else:
                role = _event({**_head(model), "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]})
                self._cache[key] = [role] + [_token_event(i, n, top, model) for i in range(n)]
        return self._cache[key]

    def metrics(self) -> bytes:
        hits = self.queries // 2
        lines = []
        for name, value in (("vllm:prefix_cache_queries_total", self.queries), ("vllm:prefix_cache_hits_total", hits),
                            ("vllm:request_success_total", self.requests)):
            lines += [f"# HELP {name} stub counter", f"# TYPE {name} counter",
                      f'{name}{{engine="0",model_name="stub"}} {float(value)}']
        return ("\n".join(lines) + "\n").encode()


_SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
             b"transfer-encoding: chunked\r\n\r\n")


def _plain(status: str, ctype: str, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(), ctype.encode(), len(body), body)


class _Conn(asyncio.Protocol):
    """One keep-alive connection; requests are handled one after another (no pipelining)."""

    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while self.transport is not None and not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            method, path = (head[0].split(" ") + ["", ""])[:2]
            length = 0
            for h in head[1:]:
                k, _, v = h.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4:end + 4 + length])
            del self.buf[:end + 4 + length]
            self._handle(method, path, body)

    def _handle(self, method: str, path: str, body: bytes) -> None:
        t = self.transport
        assert t is not None
        if method == "GET" and path == "/metrics":
            t.write(_plain("200 OK", "text/plain; version=0.0.4", self.server.metrics()))
            return
        if method == "POST" and self.server.pausable and path.split("?")[0] in ("/pause", "/resume"):
            self.server.log.append(path.split("?")[0])
            if path.startswith("/pause"):
                self.server._resumed = asyncio.Event()
            elif self.server._resumed is not None:
                self.server._resumed.set()
            t.write(_plain("200 OK", "application/json", b'{"status":"ok"}'))
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
            t.write(_plain("404 Not Found", "application/json", b'{"error":{"message":"not found","code":404}}'))
            return
        req = json.loads(body)
        model = str(req.get("model", "stub"))
        if path != "/tokenize":
            self.server.log.append(str((req.get("messages") or [{}])[-1].get("content", "")))
        if path == "/tokenize":
            if model == "stub-tokenize-400":
                err = {"error": {"message": "stub: cannot tokenize", "type": "BadRequestError", "code": 400}}
                t.write(_plain("400 Bad Request", "application/json", json.dumps(err).encode()))
                return
            ids = tokenize(req)
            answer = {"count": len(ids), "max_model_len": 65536, "tokens": ids, "token_strs": None}
            t.write(_plain("200 OK", "application/json", json.dumps(answer).encode()))
            return
        if model == "stub-500":
            err = {"error": {"message": "stub: forced failure", "type": "InternalServerError", "param": None, "code": 500}}
            t.write(_plain("500 Internal Server Error", "application/json", json.dumps(err).encode()))
            return
        n = max(1, min(int(req.get("max_tokens") or 16), MAX_TOKENS))
        top = int(req.get("top_logprobs") or 0)
        prompt = prompt_tokens(req)
        self.server.requests += 1
        self.server.queries += prompt
        # top_logprobs (chat) or logprobs (completions: an int there) asks for the top tokens.
        completions = path == "/v1/completions"
        top = int(req.get("logprobs") or 0) if completions else top
        events = self.server.token_events(n, top, model, completions)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}
        tail = [_event({**_head(model), "choices": [], "usage": usage}), _DONE, b"0\r\n\r\n"]
        if model in ("stub-error-chunk", "stub-drop"):
            events = events[:3]
            if model == "stub-drop":
                t.write(_SSE_HEAD + b"".join(events))
                t.close()
                return
            err = {"error": {"message": "stub: stream failed", "type": "InternalServerError", "code": 500}}
            tail = [_event(err), _DONE, b"0\r\n\r\n"]
        held = self.server._resumed is not None and not self.server._resumed.is_set()
        if not (self.server.first_token_delay_s or self.server.token_delay_s or held):
            t.write(_SSE_HEAD + b"".join(events) + b"".join(tail))  # the fast path: one write
            return
        self.busy = True
        asyncio.get_running_loop().create_task(self._paced(events, tail))

    async def _paced(self, events: list[bytes], tail: list[bytes]) -> None:
        t = self.transport
        if t is None:
            return
        t.write(_SSE_HEAD)
        if self.server._resumed is not None:
            await self.server._resumed.wait()
        if self.transport is None:
            return
        self.transport.write(events[0])
        await asyncio.sleep(self.server.first_token_delay_s)
        for i, ev in enumerate(events[1:]):
            if i and self.server.token_delay_s:
                await asyncio.sleep(self.server.token_delay_s)
            if self.transport is None:
                return
            self.transport.write(ev)
        if self.transport is not None:
            self.transport.write(b"".join(tail))
        self.busy = False
        self._next()


_DONE = b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")


async def _serve(port: int, max_seconds: float, first_token_delay_s: float, token_delay_s: float) -> None:
    server = await StubServer(port=port, first_token_delay_s=first_token_delay_s, token_delay_s=token_delay_s).start()
    print(f"stub listening on {server.base_url} (NOT an engine)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout=max_seconds)  # stops by itself
    except TimeoutError:
        pass
    await server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=300, help="exit after this long, whatever happens")
    ap.add_argument("--first-token-delay-ms", type=float, default=0.0)
    ap.add_argument("--token-delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    asyncio.run(_serve(args.port, args.max_seconds, args.first_token_delay_ms / 1000, args.token_delay_ms / 1000))


if __name__ == "__main__":
    main()
