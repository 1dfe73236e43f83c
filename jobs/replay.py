"""Replay a workload against an OpenAI-compatible vLLM server and record every token.

Greedy (temperature 0), streamed, with top-k logprobs and token ids
(``return_tokens_as_token_ids``) so the grader compares ids, not detokenised text,
and knows how close each greedy choice was to a tie. Requests of one phase go out
at once: concurrent prefills sharing the token budget are part of the failure
mode being hunted.

Two APIs (``api`` of the workload): ``chat`` sends the messages to
``/v1/chat/completions``; ``completions`` asks the engine's ``/tokenize`` to apply its
own chat template to the same messages and sends the token ids to ``/v1/completions``,
so both APIs see the same prompt and their answers are comparable token by token,
while each goes through its own serving path (request parsing, detokenising, stream
framing).

The answer's end: the replay generates ``max_tokens`` tokens whatever the model does
(``ignore_eos``, so every position has a control token to compare with), so the text
goes on past the model's end-of-turn token. Given the model's end tokens
(``vmatrix.cells.model_end_tokens``), each record notes how much of its text came before the
first one (``answer_chars``): the answer that an expectation is graded on.

Gated phases (``Workload.gated``, a shape's ``gate: true``): the replay holds the engine's
scheduler (vLLM's own pause, ``POST /pause?mode=keep``, served with
``VLLM_SERVER_DEV_MODE=1``), sends the phase's requests one at a time, each once the
server has answered the previous one's headers (and so handed it to the engine), and then
resumes it: the scheduler meets every request at once and in the phase's order, so the
chunk layout of a race is the same every run instead of following when each request
reached the engine. Their TTFT and e2e latency count from the resume.

Early abort: given the control's tokens and margins (:class:`ControlReference`), the
replay compares each phase's answers as they arrive, with the grader's own
:func:`jobs.divergence.first_divergence`, and stops sending once enough of them diverge at
a clear margin; the requests it never sent are listed as skipped.

The client is aiohttp: one ``aiohttp.ClientSession`` per engine life (:func:`client_session`),
at most :data:`MAX_CONNECTIONS` keep-alive connections, ``timeout_s`` for connecting and
for each wait on the socket. ``send`` reads the stream's bytes as they arrive and splits
the SSE lines itself (LF or CRLF), each ``data:`` line parsed with ``json.loads`` into
:func:`apply_chunk`. A refused request (non-200) or an error event records ``rec.error``
and keeps the tokens so far; a connection error or timeout becomes the request's error,
never an exception out of :func:`replay`. Cost against a raw socket client:
docs/BENCHMARKS.md, "Replay client overhead".
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp

from vmatrix.errors import GateError
from vmatrix.jobs.divergence import first_divergence
from vmatrix.jobs.metrics import SCRAPE_TIMEOUT_S, delta, scrape
from vmatrix.records import ControlReference, RequestRecord, Transcript
from vmatrix.workload import Api, ReplayRequest, Workload

# What every request asks of the engine besides its prompt and length; `vmatrix repro`
# writes the same into its script, so a reproducer sends what the replay sent.
SAMPLING: dict[str, object] = {
    "temperature": 0,
    "seed": 0,
    "ignore_eos": True,  # fixed-length outputs: every position has a control to compare with
    "return_tokens_as_token_ids": True,
}


def _token_id(token: str) -> int:
    # With return_tokens_as_token_ids the server sends "token_id:123".
    return int(token.rsplit(":", 1)[1]) if token.startswith("token_id:") else -1


class StreamClock:
    """When a request was sent and when its last token-carrying chunk arrived."""

    __slots__ = ("last", "sent")

    def __init__(self) -> None:
        self.sent = self.last = time.perf_counter()


def _completion_items(logprobs: dict) -> list[dict]:
    """A /v1/completions chunk's logprobs (parallel lists; top logprobs as {token: logprob})
    in the chat shape that :func:`apply_chunk` reads."""
    tops = logprobs.get("top_logprobs") or [None] * len(logprobs["tokens"])
    return [{"token": token, "logprob": lp, "top_logprobs": [{"logprob": v} for v in (top or {}).values()]}
            for token, lp, top in zip(logprobs["tokens"], logprobs["token_logprobs"], tops, strict=False)]


def _chars_before(items: list[dict], end: int, content: str) -> int:
    """How much of one chunk's ``content`` came from its tokens before ``items[end]``.

    One token per chunk is the usual case (0). A chunk of several tokens (speculative
    decoding accepting drafts, or a slow reader) carries one text for all of them; each
    token's own text is in its ``bytes`` (the chat API's logprobs give them), so the
    tokens before the end token are measured from those. Without them, the whole chunk
    counts: the answer then carries what followed the end token in the same chunk.
    """
    if end == 0:
        return 0
    pieces = [item.get("bytes") for item in items[:end]]
    if all(isinstance(p, list) for p in pieces):
        before = b"".join(bytes(p) for p in pieces).decode("utf-8", "replace")  # type: ignore[arg-type]
        if content.startswith(before):
            return len(before)
    return len(content)


def apply_chunk(rec: RequestRecord, chunk: dict, text: list[str], clock: StreamClock,
                end_tokens: frozenset[int] = frozenset()) -> bool:
    """Fold one streamed chat-completion chunk into ``rec``; False once the stream reports an error.

    ``end_tokens``: the model's end-of-turn ids; the first one sets ``rec.answer_chars``.
    """
    if chunk.get("error"):
        rec.error = _error_message(json.dumps(chunk))
        return False
    if usage := chunk.get("usage"):
        rec.prompt_tokens = usage.get("prompt_tokens", 0)
        # Reported with the engine's --enable-prompt-tokens-details: the hit, per request.
        if isinstance(details := usage.get("prompt_tokens_details"), dict):
            rec.cached_tokens = details.get("cached_tokens")
    for choice in chunk.get("choices", ()):
        logprobs = choice.get("logprobs") or {}
        items = logprobs.get("content") or (_completion_items(logprobs) if "tokens" in logprobs else ())
        if items:
            now = time.perf_counter()
            if rec.ttft_s is None:
                rec.ttft_s = now - clock.sent
            else:
                rec.itl_s.append(now - clock.last)
            clock.last = now
        end = None
        for n, item in enumerate(items):
            tops = [t["logprob"] for t in item.get("top_logprobs") or ()]
            if item["logprob"] is None or None in tops:
                # vLLM writes a NaN logprob as null in a stream (a non-streamed answer is
                # refused: "Out of range float values are not JSON compliant"): the
                # model's logits are NaN, and the request has no answer to grade.
                rec.error = (f"the engine returned a null (NaN) logprob at generated token "
                             f"{len(rec.token_ids)} (token {item['token']})")
                return False
            token = _token_id(item["token"])
            if end is None and token in end_tokens and rec.answer_chars is None:
                end = n
            rec.token_ids.append(token)
            rec.logprobs.append(item["logprob"])
            tops.sort(reverse=True)
            rec.margins.append(tops[0] - tops[1] if len(tops) > 1 else None)
        content = choice["delta"].get("content") if "delta" in choice else choice.get("text")
        if end is not None:
            rec.answer_chars = sum(map(len, text)) + _chars_before(items, end, content or "")
        if content:
            text.append(content)
        if choice.get("finish_reason"):
            rec.finish_reason = choice["finish_reason"]
    return True


async def send(
    client: aiohttp.ClientSession, base_url: str, model: str, req: ReplayRequest, max_tokens: int,
    top_logprobs: int, api: Api = "chat", end_tokens: frozenset[int] = frozenset(),
    accepted: asyncio.Event | None = None,
) -> RequestRecord:
    """One request, streamed; with ``api="completions"`` the prompt's token ids come from the
    engine's ``/tokenize`` first, and TTFT and end-to-end time count from the completion
    request, not the tokenize call (which is preparation, not serving).

    ``accepted`` is set once the engine has answered the request's headers (or it failed):
    the server has then handed it to the engine (:func:`gated_phase`)."""
    try:
        return await _send(client, base_url, model, req, max_tokens, top_logprobs, api, end_tokens, accepted)
    finally:
        if accepted is not None:
            accepted.set()


async def _send(
    client: aiohttp.ClientSession, base_url: str, model: str, req: ReplayRequest, max_tokens: int,
    top_logprobs: int, api: Api, end_tokens: frozenset[int], accepted: asyncio.Event | None,
) -> RequestRecord:
    rec = RequestRecord(key=req.key, session=req.session, turn=req.turn, phase=req.phase, expect=req.expect)
    common = {"model": model, "max_tokens": max_tokens, **SAMPLING, "stream": True,
              "stream_options": {"include_usage": True}}
    if api == "chat":
        url = f"{base_url}/v1/chat/completions"
        body = {**common, "messages": req.chat_messages(), "logprobs": True, "top_logprobs": top_logprobs}
    else:
        prompt = await _prompt_ids(client, base_url, model, req, rec)
        if prompt is None:
            return rec
        url = f"{base_url}/v1/completions"
        body = {**common, "prompt": prompt, "logprobs": top_logprobs}
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    loads = json.loads
    clock = StreamClock()
    text: list[str] = []
    try:
        async with await _post(client, url, content) as resp:
            if accepted is not None:
                accepted.set()
            if resp.status != 200:
                detail = (await resp.read()).decode(errors="replace")[:500]
                rec.error = f"HTTP {resp.status}: {_error_message(detail)}"
                rec.e2e_s = time.perf_counter() - clock.sent
                return rec
            # SSE lines split here from the bytes as they arrive (LF or CRLF), not one
            # readline() per line: all the lines of one read in one pass.
            pending = b""
            stop = False
            async for data in resp.content.iter_any():
                lines = (pending + data if pending else data).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if not line.startswith(b"data: ") or (chunk := line[6:].rstrip(b"\r")) == b"[DONE]":
                        continue
                    # str, not bytes: json skips guessing the encoding
                    if not apply_chunk(rec, loads(chunk.decode("utf-8", "replace")), text, clock, end_tokens):
                        stop = True
                        break
                if stop:
                    break  # leaving the block drops the connection: the rest of its stream is not read
            else:
                if pending.startswith(b"data: ") and (chunk := pending[6:].rstrip(b"\r")) != b"[DONE]":
                    # a last line without its newline
                    apply_chunk(rec, loads(chunk.decode("utf-8", "replace")), text, clock, end_tokens)
    except CLIENT_ERRORS as exc:
        rec.error = _failure(exc)
    rec.text = "".join(text)
    rec.e2e_s = time.perf_counter() - clock.sent
    return rec


# What a request can fail with on the way (refused or dropped connection, malformed
# answer, a socket wait past timeout_s): recorded on the request, never raised.
CLIENT_ERRORS = (aiohttp.ClientError, TimeoutError)


def stalled(error: str | None) -> bool:
    """Whether a request's ``error`` says the engine sent nothing for ``timeout_s`` (a wait
    on the socket, or for a connection, ran out), as opposed to refusing or dropping it."""
    if error is None:
        return False
    name = error.removeprefix("tokenize: ").split(":", 1)[0]
    return name in ("SocketTimeoutError", "ServerTimeoutError", "ConnectionTimeoutError", "TimeoutError")


async def _post(client: aiohttp.ClientSession, url: str, content: bytes) -> aiohttp.ClientResponse:
    """POST, sent once more on a fresh connection when the first went down before any answer.

    A keep-alive connection the server closed while idle can be taken for the next
    request before the client has read the close (aiohttp retries only idempotent
    methods then, RFC 9112 9.3.1); nothing of that request was answered, so it goes
    again. aiohttp does not say whether the connection was a reused one, so a fresh one
    that dropped the request unanswered is tried twice too; a refused connection
    (``ClientConnectorError``) is not sent again.
    """
    try:
        return await client.post(url, data=content, headers=_JSON)
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        return await client.post(url, data=content, headers=_JSON)


def _failure(exc: BaseException) -> str:
    """``Name: what happened`` on one line, without the URL that aiohttp's
    ``ClientResponseError`` names: the engine's port differs from cell to cell, and the
    same failure should read the same (it can become the cell's signature)."""
    detail = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    detail = " ".join(detail.split())
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


_JSON = {"content-type": "application/json"}


async def _prompt_ids(client: aiohttp.ClientSession, base_url: str, model: str, req: ReplayRequest,
                      rec: RequestRecord) -> list[int] | None:
    """The request's messages through the engine's own chat template, as token ids; None
    (and ``rec.error`` set) when the engine would not tokenize them."""
    body = {"model": model, "messages": req.chat_messages(), "add_generation_prompt": True}
    try:
        async with await _post(client, f"{base_url}/tokenize", json.dumps(body).encode()) as resp:
            answer = await resp.read()
            status = resp.status
    except CLIENT_ERRORS as exc:
        rec.error = f"tokenize: {_failure(exc)}"
        return None
    if status != 200:
        rec.error = f"tokenize: HTTP {status}: {_error_message(answer.decode(errors='replace'))}"
        return None
    return list(json.loads(answer)["tokens"])


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
        return str((data.get("error") or {}).get("message") or data)[:300]
    except (json.JSONDecodeError, AttributeError):
        return body[:300]


Restart = Callable[[str], Awaitable[bool]]  # (phase just done) -> engine back and ready?


async def replay(
    base_url: str,
    model: str,
    workload: Workload,
    on_phase: Callable[[str], None] | None = None,
    timeout_s: float = 600,
    restart: Restart | None = None,
    control: ControlReference | None = None,
    end_tokens: frozenset[int] = frozenset(),
    on_request: Callable[[int, int], None] | None = None,
) -> Transcript:
    """Run every phase in order; stop after a phase in which the engine went away, or
    (with ``control``) once ``control.abort_after`` requests diverged confidently.

    After each phase named in ``workload.restart_after`` (except the last phase:
    nothing would follow) the replay awaits ``restart(phase)``; the caller owns the
    engine, stops it and starts it again at the same address. If it does not come
    back (False), the replay stops there. Requests sent after a restart carry the
    number of restarts before them. Without ``restart``, restart points are refused:
    skipping them would grade a different experiment.

    ``end_tokens``: the model's end-of-turn token ids (``vmatrix.cells.model_end_tokens``); without
    them no record knows where its answer ended (``answer_chars`` None), and every
    expectation grades wrong, in the cell and the control alike.

    ``on_request(done, total)``: called as each request's answer is complete (the
    caller's progress; it should return at once). None: nothing extra per request.

    Raises nothing for engine failures: failed requests carry ``error`` and the
    caller decides (with the process state) whether the engine crashed. One exception:
    :class:`GateError` when a gated phase's engine will not pause or resume its scheduler
    (the cell cannot be run as specified there; run_cell records it as ``invalid``).
    """
    points = workload.restart_points
    if points and restart is None:
        raise ValueError(f"workload {workload.name!r} restarts the engine after {points[0]!r}; give replay a restart")
    transcript = Transcript()
    restarts = 0
    diverged = 0
    phases = list(workload.phases)
    total = sum(len(requests) for _, requests in phases)
    answered = 0

    async def counted(request: Awaitable[RequestRecord]) -> RequestRecord:
        nonlocal answered
        rec = await request
        answered += 1
        assert on_request is not None
        on_request(answered, total)
        return rec

    if on_request is not None:
        on_request(0, total)
    # One client per engine life: connections to a stopped engine are dead.
    client = client_session(timeout_s)
    try:
        for n, (phase, requests) in enumerate(phases):
            if control is not None and diverged >= control.abort_after:
                transcript.aborted_early = True
                transcript.skipped = [r.key for _, later in phases[n:] for r in later]
                break
            if on_phase:
                on_phase(phase)
            before = await _safe_scrape(client, base_url, timeout_s)
            sending = _sender(client, base_url, model, workload, end_tokens, counted if on_request else None)
            if phase in workload.gated:
                records = await gated_phase(client, base_url, requests, sending)
            else:
                records = await asyncio.gather(*map(sending, requests))
            for rec in records:
                rec.restarts = restarts
            transcript.requests.extend(records)
            after = await _safe_scrape(client, base_url, timeout_s)
            if before is not None and after is not None:
                transcript.metrics[phase] = delta(before, after)
            # A failed request means the stack cannot serve this workload (dead engine,
            # 5xx, refused prompt); later phases would only repeat the failure.
            if any(r.error for r in records):
                break
            if control is not None:
                diverged += sum(1 for r in records if confidently_diverged(r, control))
            if phase in points:
                assert restart is not None
                if on_phase:
                    on_phase(f"restarting after {phase}")
                await client.close()
                client = client_session(timeout_s)
                if not await restart(phase):
                    break
                restarts += 1
    finally:
        await client.close()
    return transcript


def _sender(client: aiohttp.ClientSession, base_url: str, model: str, workload: Workload,
            end_tokens: frozenset[int], counted: Callable[[Awaitable[RequestRecord]], Awaitable[RequestRecord]] | None,
            ) -> Callable[..., Awaitable[RequestRecord]]:
    """How :func:`replay` sends one request of a phase on ``client`` (counted, if given)."""
    def sending(r: ReplayRequest, accepted: asyncio.Event | None = None) -> Awaitable[RequestRecord]:
        sent = send(client, base_url, model, r, workload.max_tokens, workload.top_logprobs, workload.api,
                    end_tokens, accepted)
        return counted(sent) if counted is not None else sent
    return sending


# After the last request of a gated phase was answered its headers: the server hands a
# request to the engine right after them; the pause and the adds share one queue to the
# engine core, so the resume sent after this lands behind every add.
GATE_SETTLE_S = 0.2


async def gated_phase(
    client: aiohttp.ClientSession, base_url: str, requests: tuple[ReplayRequest, ...],
    sending: Callable[[ReplayRequest, asyncio.Event], Awaitable[RequestRecord]],
) -> list[RequestRecord]:
    """One phase held at the engine's scheduler (module docstring): pause (mode ``keep``,
    the prefix cache kept), each request sent once the previous one was accepted, resume.

    Raises :class:`GateError` when the engine will not pause; the scheduler is resumed
    whatever happens once it was paused, so a failed request never leaves it held.
    A record's TTFT and e2e latency count from the resume: the hold before it is the
    gate's, not the engine's (a request sent first waited for every later one's send)."""
    await _scheduler(client, base_url, "pause", {"mode": "keep", "clear_cache": "false"})
    tasks: list[asyncio.Task[RequestRecord]] = []
    sent: list[float] = []
    try:
        for r in requests:
            accepted = asyncio.Event()
            sent.append(time.perf_counter())
            tasks.append(asyncio.ensure_future(sending(r, accepted)))
            await accepted.wait()
        await asyncio.sleep(GATE_SETTLE_S)
    finally:
        resumed = time.perf_counter()
        await _scheduler(client, base_url, "resume", {})
    records = list(await asyncio.gather(*tasks))
    for rec, at in zip(records, sent, strict=True):
        held = resumed - at
        rec.ttft_s = None if rec.ttft_s is None else max(0.0, rec.ttft_s - held)
        rec.e2e_s = None if rec.e2e_s is None else max(0.0, rec.e2e_s - held)
    return records


async def _scheduler(client: aiohttp.ClientSession, base_url: str, action: str, params: dict[str, str]) -> None:
    try:
        async with client.post(f"{base_url}/{action}", params=params) as resp:
            if resp.status == 200:
                return
            detail = (await resp.read()).decode(errors="replace")[:200]
    except CLIENT_ERRORS as exc:
        detail = _failure(exc)
    else:
        detail = f"HTTP {resp.status}: {_error_message(detail)}"
    raise GateError(f"gate: the engine did not {action} its scheduler (POST /{action}: {detail}); a gated phase "
                    "needs vLLM's pause (mode keep) and VLLM_SERVER_DEV_MODE=1")


MAX_CONNECTIONS = 256  # requests in flight at once; more wait for a free connection
# Below the engine's own keep-alive (uvicorn's, VLLM_HTTP_TIMEOUT_KEEP_ALIVE: 5 s), so the
# client lets an idle connection go before the server can close it under a new request.
KEEPALIVE_S = 4.0


def client_session(timeout_s: float) -> aiohttp.ClientSession:
    """The session :func:`replay` opens for each engine life (and ``send`` takes): keep-alive,
    ``timeout_s`` to connect (waiting for a free connection included) and for each read, no
    bound on a whole request (a long stream is fine while it moves); cookies ignored. Open
    it inside the event loop that uses it."""
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
    timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


def confidently_diverged(rec: RequestRecord, control: ControlReference) -> bool:
    """Whether one answer left the control's at a clear margin (unknown keys never count)."""
    if rec.error or rec.key not in control.tokens:
        return False
    ref = control.tokens[rec.key]
    # The reference is the control's answer (ControlReference.from_transcript): what the
    # cell wrote past its length is not graded, so it must not stop the replay either.
    div = first_divergence(rec.token_ids[:len(ref)], ref, control.margins[rec.key], control.tie_margin)
    return div is not None and div.confident


async def _safe_scrape(client: aiohttp.ClientSession, base_url: str, timeout_s: float) -> dict[str, float] | None:
    # No longer than a request may wait: a hung engine is told by its requests, not its scrapes.
    try:
        return await scrape(client, base_url, min(SCRAPE_TIMEOUT_S, timeout_s))
    except CLIENT_ERRORS:
        return None
