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
(:func:`model_end_tokens`), each record notes how much of its text came before the
first one (``answer_chars``): the answer that an expectation is graded on.

Early abort: given the control's tokens and margins (:class:`ControlReference`), the
replay compares each phase's answers as they arrive, with the grader's own
:func:`jobs.grade.first_divergence`, and stops sending once enough of them diverge at
a clear margin; the requests it never sent are listed as skipped.

The client is httpx (``httpx.AsyncClient``, ``client.stream``, httpx's timeouts and
exceptions) over :class:`jobs.transport.LeanTransport`, a small keep-alive HTTP/1.1
transport plugged in through httpx's transport interface: httpx's default stack
(httpcore + h11) spent about ten times the CPU per streamed request and could not
keep 256 requests in flight at the rate the overhead target asks (docs/BENCHMARKS.md,
"Replay client overhead"). ``send`` reads the stream's raw bytes and splits the SSE
lines itself for the same reason. VMATRIX_REPLAY_TRANSPORT=httpx (or
``replay(transport="httpx")``) puts httpx's default stack back, as a reference.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from jobs.grade import first_divergence
from jobs.metrics import delta, scrape
from jobs.records import ControlReference, RequestRecord, Transcript
from jobs.transport import LeanTransport
from jobs.workload import Api, ReplayRequest, Workload


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


def model_end_tokens(model_dir: str | Path) -> frozenset[int]:
    """The token ids that end a turn for the model in ``model_dir``: ``eos_token_id`` of its
    ``generation_config.json`` (what vLLM stops at), else of its ``config.json``; empty
    when neither names one (or the folder cannot be read)."""
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((Path(model_dir) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        ids = eos if isinstance(eos, list) else [eos]
        found = frozenset(i for i in ids if isinstance(i, int) and not isinstance(i, bool))
        if found:
            return found
    return frozenset()


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
    if chunk.get("usage"):
        rec.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
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
            token = _token_id(item["token"])
            if end is None and token in end_tokens and rec.answer_chars is None:
                end = n
            rec.token_ids.append(token)
            rec.logprobs.append(item["logprob"])
            tops = sorted((t["logprob"] for t in item.get("top_logprobs") or ()), reverse=True)
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
    client: httpx.AsyncClient, base_url: str, model: str, req: ReplayRequest, max_tokens: int, top_logprobs: int,
    api: Api = "chat", end_tokens: frozenset[int] = frozenset(),
) -> RequestRecord:
    """One request, streamed; with ``api="completions"`` the prompt's token ids come from the
    engine's ``/tokenize`` first, and TTFT and end-to-end time count from the completion
    request, not the tokenize call (which is preparation, not serving)."""
    rec = RequestRecord(key=req.key, session=req.session, turn=req.turn, phase=req.phase, expect=req.expect)
    common = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "ignore_eos": True,  # fixed-length outputs: every position has a control to compare with
        "return_tokens_as_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        url = _url(base_url, "/v1/chat/completions")
        body = {**common, "messages": req.chat_messages(), "logprobs": True, "top_logprobs": top_logprobs}
    else:
        prompt = await _prompt_ids(client, base_url, model, req, rec)
        if prompt is None:
            return rec
        url = _url(base_url, "/v1/completions")
        body = {**common, "prompt": prompt, "logprobs": top_logprobs}
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()  # what httpx's json= sends
    loads = json.loads
    clock = StreamClock()
    text: list[str] = []
    try:
        async with client.stream("POST", url, content=content, headers=_JSON) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:500]
                rec.error = f"HTTP {resp.status_code}: {_error_message(detail)}"
                rec.e2e_s = time.perf_counter() - clock.sent
                return rec
            # SSE lines split here from raw bytes, as aiter_lines would (LF or CRLF), without
            # httpx's per-chunk decoder stack: that was a quarter of the client's CPU.
            pending = b""
            stop = False
            async for data in resp.aiter_raw():
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
                    break
            else:
                if pending.startswith(b"data: ") and (chunk := pending[6:].rstrip(b"\r")) != b"[DONE]":
                    # a last line without its newline
                    apply_chunk(rec, loads(chunk.decode("utf-8", "replace")), text, clock, end_tokens)
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    rec.text = "".join(text)
    rec.e2e_s = time.perf_counter() - clock.sent
    return rec


_JSON = {"content-type": "application/json"}


@functools.lru_cache(maxsize=64)
def _url(base_url: str, path: str) -> httpx.URL:
    # Parsed once: httpx's URL parsing was a tenth of the client's CPU per request.
    return httpx.URL(f"{base_url}{path}")


async def _prompt_ids(client: httpx.AsyncClient, base_url: str, model: str, req: ReplayRequest,
                      rec: RequestRecord) -> list[int] | None:
    """The request's messages through the engine's own chat template, as token ids; None
    (and ``rec.error`` set) when the engine would not tokenize them."""
    body = {"model": model, "messages": req.chat_messages(), "add_generation_prompt": True}
    try:
        resp = await client.post(_url(base_url, "/tokenize"), content=json.dumps(body).encode(), headers=_JSON)
    except httpx.HTTPError as exc:
        rec.error = f"tokenize: {type(exc).__name__}: {exc}"
        return None
    if resp.status_code != 200:
        rec.error = f"tokenize: HTTP {resp.status_code}: {_error_message(resp.text)}"
        return None
    return list(resp.json()["tokens"])


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
        return str((data.get("error") or {}).get("message") or data)[:300]
    except (json.JSONDecodeError, AttributeError):
        return body[:300]


TRANSPORT_ENV = "VMATRIX_REPLAY_TRANSPORT"

Restart = Callable[[str], Awaitable[bool]]  # (phase just done) -> engine back and ready?


async def replay(
    base_url: str,
    model: str,
    workload: Workload,
    on_phase: Callable[[str], None] | None = None,
    timeout_s: float = 600,
    restart: Restart | None = None,
    control: ControlReference | None = None,
    transport: str | None = None,
    end_tokens: frozenset[int] = frozenset(),
) -> Transcript:
    """Run every phase in order; stop after a phase in which the engine went away, or
    (with ``control``) once ``control.abort_after`` requests diverged confidently.

    After each phase named in ``workload.restart_after`` (except the last phase:
    nothing would follow) the replay awaits ``restart(phase)``; the caller owns the
    engine, stops it and starts it again at the same address. If it does not come
    back (False), the replay stops there. Requests sent after a restart carry the
    number of restarts before them. Without ``restart``, restart points are refused:
    skipping them would grade a different experiment.

    ``transport`` picks the connection layer (:func:`replay_transport`; default: the
    lean one of jobs/transport.py, or VMATRIX_REPLAY_TRANSPORT).

    ``end_tokens``: the model's end-of-turn token ids (:func:`model_end_tokens`); without
    them no record knows where its answer ended (``answer_chars`` None), and every
    expectation grades wrong, in the cell and the control alike.

    Raises nothing for engine failures: failed requests carry ``error`` and the
    caller decides (with the process state) whether the engine crashed.
    """
    points = workload.restart_points
    if points and restart is None:
        raise ValueError(f"workload {workload.name!r} restarts the engine after {points[0]!r}; give replay a restart")
    transcript = Transcript()
    restarts = 0
    diverged = 0
    phases = list(workload.phases)
    # One client per engine life: connections to a stopped engine are dead.
    client = _client(timeout_s, transport)
    try:
        for n, (phase, requests) in enumerate(phases):
            if control is not None and diverged >= control.abort_after:
                transcript.aborted_early = True
                transcript.skipped = [r.key for _, later in phases[n:] for r in later]
                break
            if on_phase:
                on_phase(phase)
            before = await _safe_scrape(client, base_url)
            records = await asyncio.gather(
                *(send(client, base_url, model, r, workload.max_tokens, workload.top_logprobs, workload.api,
                       end_tokens) for r in requests)
            )
            for rec in records:
                rec.restarts = restarts
            transcript.requests.extend(records)
            after = await _safe_scrape(client, base_url)
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
                await client.aclose()
                client = _client(timeout_s, transport)
                if not await restart(phase):
                    break
                restarts += 1
    finally:
        await client.aclose()
    return transcript


MAX_CONNECTIONS = 256


def replay_transport(name: str | None = None) -> httpx.AsyncBaseTransport | None:
    """The replay's connection layer: ``lean`` (default) or ``httpx`` (httpx's own, None here).

    ``httpx`` (or VMATRIX_REPLAY_TRANSPORT=httpx) exists as a reference: when a cell's
    requests fail in a way that could be the client's fault, the same replay over
    httpx's default stack (httpcore + h11, about 10x the CPU per request) says whether
    the lean transport is to blame. It also brings proxies and HTTP/2 support, should an
    engine ever sit behind one.
    """
    name = name or os.environ.get(TRANSPORT_ENV) or "lean"
    if name == "lean":
        return LeanTransport(max_connections=MAX_CONNECTIONS)
    if name == "httpx":
        return None
    raise ValueError(f"{TRANSPORT_ENV}: unknown replay transport {name!r} (lean or httpx)")


def _client(timeout_s: float, transport: str | None = None) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, transport=replay_transport(transport))


def confidently_diverged(rec: RequestRecord, control: ControlReference) -> bool:
    """Whether one answer left the control's at a clear margin (unknown keys never count)."""
    if rec.error or rec.key not in control.tokens:
        return False
    ref = control.tokens[rec.key]
    # The reference is the control's answer (ControlReference.from_transcript): what the
    # cell wrote past its length is not graded, so it must not stop the replay either.
    div = first_divergence(rec.token_ids[:len(ref)], ref, control.margins[rec.key], control.tie_margin)
    return div is not None and div.confident


async def _safe_scrape(client: httpx.AsyncClient, base_url: str) -> dict[str, float] | None:
    try:
        return await scrape(client, base_url)
    except httpx.HTTPError:
        return None
