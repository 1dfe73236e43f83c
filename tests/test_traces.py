"""Traces: the vmatrix.trace/1 format, synthesis, importers, and their replay shape.

A bad trace must be one error line naming file and line, as a bad matrix is;
synthesis must be byte-deterministic (the trace's digest goes into cell ids);
importers must rebuild each logged request exactly as it was sent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from vmatrix.images.canary import corpus
from vmatrix.jobs.importers import import_openai, import_sharegpt, import_vllm_custom, segment_turns
from vmatrix.jobs.trace_synth import synth_trace
from vmatrix.jobs.traces import (
    Phase,
    Schedule,
    Session,
    SharedPrefix,
    Trace,
    TraceError,
    Turn,
    dump_trace,
    load_trace,
    request_messages,
    save_trace,
    trace_digest,
    trace_to_workload,
)
from vmatrix.orchestrator.cli.traces import traces_app

runner = CliRunner()
cli = typer.Typer()
cli.add_typer(traces_app, name="traces")


def small_trace() -> Trace:
    prefix = SharedPrefix(system="sys", tools=("read_file", {"type": "function", "function": {"name": "x"}}),
                          persona="persona")
    s0 = Session("s0", (Turn("u0", "a0", ("out0",)), Turn("", "a1"), Turn("u2")))
    s1 = Session("s1", (Turn("v0", "b0"), Turn("v1")))
    late = Session("late", (Turn("w0"),))
    schedule = Schedule(
        phases=(Phase("p0", (("s0", 0), ("s1", 0))), Phase("p1", (("s0", 1), ("s1", 1))),
                Phase("p2", (("s0", 2),)), Phase("switch", (("late", 0),))),
        restart_after=("p1",),
    )
    return Trace("small", prefix, (s0, s1, late), schedule)


# ---------------------------------------------------------------- format


def test_round_trip(tmp_path: Path) -> None:
    trace = small_trace()
    save_trace(trace, tmp_path / "t.jsonl")
    assert load_trace(tmp_path / "t.jsonl") == trace
    text = (tmp_path / "t.jsonl").read_text()
    assert [json.loads(line)["type"] for line in text.splitlines()] == ["header", "session", "session", "session", "schedule"]
    assert json.loads(text.splitlines()[0])["schema"] == "vmatrix.trace/1"
    assert trace_digest(load_trace(tmp_path / "t.jsonl")) == trace_digest(trace)


def test_a_session_may_carry_its_own_system_message(tmp_path: Path) -> None:
    plain = small_trace()
    own = Trace(plain.name, plain.prefix, (Session("s0", plain.sessions[0].turns, system="mine"), *plain.sessions[1:]),
                plain.schedule)
    save_trace(own, tmp_path / "t.jsonl")
    assert load_trace(tmp_path / "t.jsonl") == own
    by_key = {r.key: r for r in trace_to_workload(own, 7, 3).requests}
    assert by_key["s0/0"].messages[0] == ("system", "mine")  # instead of the shared prefix
    assert by_key["s1/0"].messages[0] == ("system", plain.prefix.render())
    # A trace without it is written as before: the same bytes, the same digest.
    assert '"system":"mine"' in dump_trace(own) and '"system":"' not in dump_trace(plain).split("\n", 1)[1]
    bad = (tmp_path / "t.jsonl").read_text().replace('"system":"mine"', '"system":3')
    (tmp_path / "bad.jsonl").write_text(bad)
    with pytest.raises(TraceError, match=r"bad.jsonl:2: session system must be a string"):
        load_trace(tmp_path / "bad.jsonl")


def test_trace_to_workload_phases_keys_and_messages() -> None:
    wl = trace_to_workload(small_trace(), max_tokens=7, top_logprobs=3)
    assert (wl.name, wl.max_tokens, wl.top_logprobs) == ("small", 7, 3)
    assert [(name, [r.key for r in reqs]) for name, reqs in wl.phases] == [
        ("p0", ["s0/0", "s1/0"]), ("p1", ["s0/1", "s1/1"]), ("p2", ["s0/2"]), ("switch", ["late/0"])]
    by_key = {r.key: r for r in wl.requests}
    system = 'sys\ntools: read_file {"function":{"name":"x"},"type":"function"}\npersona'
    # Turn 1 has no user text: it is fed by turn 0's tool output, sent as a tool message.
    assert by_key["s0/1"].messages == (("system", system), ("user", "u0"), ("assistant", "a0"), ("tool", "out0"))
    assert by_key["s0/2"].messages[-3:] == (("tool", "out0"), ("assistant", "a1"), ("user", "u2"))
    assert by_key["late/0"].phase == "switch" and by_key["late/0"].messages == (("system", system), ("user", "w0"))
    assert by_key["s1/1"].chat_messages()[-1] == {"role": "user", "content": "v1"}


def _lines(tmp_path: Path, lines: list[object] | str) -> Path:
    path = tmp_path / "bad.jsonl"
    text = lines if isinstance(lines, str) else "".join(json.dumps(x) + "\n" for x in lines)
    path.write_text(text)
    return path


def _good_lines() -> list[dict]:
    return [json.loads(line) for line in dump_trace(small_trace()).splitlines()]


def _error(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_expectations_travel_from_trace_to_workload_and_only_then_into_the_digest(tmp_path: Path) -> None:
    from vmatrix.expect import Expectation
    from vmatrix.jobs.workload import workload_digest
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    plain = small_trace()
    path = tmp_path / "t.jsonl"
    save_trace(plain, path)
    spec = WorkloadSpec(kind="trace", trace=str(path))
    before = workload_digest(spec)
    assert '"expect"' not in dump_trace(plain)  # absent, not null: old traces keep their bytes
    expects = (Expectation.exact("a0"), Expectation.regex(r"a\d"), Expectation.tool_call("read_file", {"path": "x"}))
    s0 = plain.sessions[0]
    s0 = Session("s0", tuple(Turn(t.user, t.assistant, t.tool_results, e) for t, e in zip(s0.turns, expects)))
    trace = Trace(plain.name, plain.prefix, (s0, *plain.sessions[1:]), plain.schedule)
    save_trace(trace, path)
    assert load_trace(path) == trace
    lines = path.read_text().splitlines()
    assert json.loads(lines[1])["turns"][2]["expect"] == {"tool_call": {"name": "read_file", "arguments": {"path": "x"}}}
    by_key = {r.key: r for r in trace_to_workload(trace, 8, 2).requests}
    assert [by_key[f"s0/{t}"].expect for t in range(3)] == list(expects) and by_key["s1/0"].expect is None
    assert workload_digest(spec) != before
    # A bare string is an exact answer; a bad expectation names its line.
    good = _good_lines()
    good[2]["turns"][0]["expect"] = "b0"
    assert load_trace(_lines(tmp_path, good)).sessions[1].turns[0].expect == Expectation.exact("b0")
    good[2]["turns"][0]["expect"] = {"regex": "(", "exact": "x"}
    assert ":3: session 's1' turn 0: expect must be a string or one of" in _error(_lines(tmp_path, good))


def test_the_canary_workload_expects_the_recited_definitions() -> None:
    import random

    from vmatrix.expect import Expectation
    from vmatrix.jobs.workload import build_workload, workload_digest
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    spec = WorkloadSpec(prefix_tokens=200, sessions=2, turns=2, agent_switches=1)
    wl = build_workload(spec)
    # The same draws as the builder's, through corpus's API only (its text may change).
    rng = random.Random(spec.seed)
    _, defs = corpus.system_prompt(rng, corpus.lines_for(spec.prefix_tokens))
    asked = {}
    for s in range(spec.sessions + spec.agent_switches):
        for t in range(spec.turns):
            user, i = corpus.user_turn(rng, defs, t)
            asked[f"s{s}/{t}"] = (user, corpus.answer(defs, i))
    assert len(wl.requests) == 5
    for r in wl.requests:
        assert r.messages[-1] == ("user", asked[r.key][0])
        assert r.expect == Expectation.exact(asked[r.key][1])
    # The next turn's recorded history is the same answer.
    s0 = {r.turn: r for r in wl.requests if r.session == "s0"}
    assert s0[1].messages[-2] == ("assistant", s0[0].expect.value)
    # Expectations are part of the workload: the canary workload's digest (pinned without
    # them in tests/test_lmcache.py) is another one now, and so are its cells' ids.
    assert workload_digest(WorkloadSpec()) != "33d204cfa6cdfb5aa05b48ffe9315a51ede458da7bfa8f3c22b681a23ba67459"


def test_a_probing_workload_asks_each_session_once_for_the_line_the_boundary_splits() -> None:
    """With probe_block_tokens, the shared prefix is laid out so that its last cached block
    ends right after a definition's name (token positions counted as the canary's tokenizer
    makes them; tests/test_canary.py checks that against it), and each session's first
    cache-hitting request asks for that definition once; without the option nothing changes."""
    from vmatrix.jobs.workload import align_boundary, build_workload, word_starts, workload_digest
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    rng = __import__("random").Random(3)
    _, defs = corpus.system_prompt(rng, 120)
    for block in (144, 384, 1000):
        aligned, line = align_boundary(defs, block)
        assert line is not None and word_starts(aligned)[line] % block == 0, block
        # Words dropped or added at a line's end, each line keeping 3 to 6 of them and its name.
        for before, after in zip(defs, aligned):
            assert (before.startswith(after) or after.startswith(before)) and 3 <= len(after.split()) - 2 <= 6
    assert align_boundary(defs[:4], 384) == (defs[:4], None), "a prefix shorter than a block has no boundary"

    spec = WorkloadSpec(probe_block_tokens=384, sessions=3, turns=3, agent_switches=2)
    wl = build_workload(spec)
    probed = [r for r in wl.requests if (r.turn == 1 and r.phase.startswith("turn")) or r.phase.startswith("switch")]
    # A system prompt per session (a switch takes a session's), so 3 lines are probed.
    assert len(probed) == 5 and len({r.expect.value for r in probed}) == 3
    for r in probed:
        defs = r.messages[0][1].split("\n")[2:]
        line = defs.index(r.expect.value)
        assert word_starts(defs)[line] == 1536, "the last cached block ends right after the probed line's name"
        again = [q for q in wl.requests if q.session == r.session and q is not r and q.expect.value == r.expect.value]
        assert not again, "asked once per session: not again from its history"
    # The sessions still share a prefix: all but each prompt's last few lines.
    first, second = (wl.requests[0].messages[0][1].split("\n"), wl.requests[1].messages[0][1].split("\n"))
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert len(first) == len(second) and len(first) - shared <= 8 and shared > 100
    assert all(r.messages[-1][1].endswith("show " + r.expect.value.split(" = ")[0]) for r in wl.requests)
    assert workload_digest(spec) != workload_digest(spec.model_copy(update={"probe_block_tokens": None}))


def test_a_probe_that_cannot_be_laid_out_is_a_spec_error(tmp_path: Path) -> None:
    """A workload that claims to probe and does not would grade prefix caching untested."""
    import pydantic

    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    with pytest.raises(pydantic.ValidationError, match="a 300-token prefix cannot be laid out .* 384-token block"):
        WorkloadSpec(prefix_tokens=300, probe_block_tokens=384)
    trace = tmp_path / "t.jsonl"
    save_trace(small_trace(), trace)
    with pytest.raises(pydantic.ValidationError, match="probe_block_tokens: a trace's prompts are its own"):
        WorkloadSpec(kind="trace", trace=str(trace), probe_block_tokens=384)


def test_truncated_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    text = dump_trace(small_trace())
    cut = text[: text.index('"id":"s1"') + 20]  # dies inside line 3
    message = _error(_lines(tmp_path, cut))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:3: bad JSON")


def test_trace_without_schedule_is_truncated(tmp_path: Path) -> None:
    message = _error(_lines(tmp_path, _good_lines()[:-1]))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:4: ") and "without a schedule line" in message


def test_unknown_schema_version(tmp_path: Path) -> None:
    lines = _good_lines()
    lines[0]["schema"] = "vmatrix.trace/2"
    message = _error(_lines(tmp_path, lines))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:1: unknown trace schema 'vmatrix.trace/2'")


def test_turn_without_content(tmp_path: Path) -> None:
    lines = _good_lines()
    lines[2]["turns"][1]["user"] = "  "  # s1 turn 1: no user text, no tool results before it
    message = _error(_lines(tmp_path, lines))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:3: session 's1' turn 1 has no content")


def test_missing_recorded_answer(tmp_path: Path) -> None:
    lines = _good_lines()
    lines[2]["turns"][0]["assistant"] = ""
    message = _error(_lines(tmp_path, lines))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:3: session 's1' turn 0 has no recorded assistant answer")


@pytest.mark.parametrize(
    ("request_", "expected"),
    [(["nobody", 0], "unknown session 'nobody'"), (["s1", 5], "names turn 5 of session 's1', which has turns 0..1")],
)
def test_schedule_naming_unknown_session_or_turn(tmp_path: Path, request_: list, expected: str) -> None:
    lines = _good_lines()
    lines[-1]["phases"][0]["requests"].append(request_)
    message = _error(_lines(tmp_path, lines))
    assert message.startswith(f"{tmp_path / 'bad.jsonl'}:5: phase 'p0' ") and expected in message


def test_other_bad_shapes_name_their_line(tmp_path: Path) -> None:
    lines = _good_lines()
    lines[1]["turns"][0]["tool_result"] = ["typo"]
    assert ":2: session 's0' turn 0: unknown key 'tool_result'" in _error(_lines(tmp_path, lines))
    lines = _good_lines()
    lines[-1]["restart_after"] = ["nope"]
    assert ":5: restart_after names unknown phase 'nope'" in _error(_lines(tmp_path, lines))
    lines = _good_lines()
    assert ":1: the first line must be the header" in _error(_lines(tmp_path, lines[1:]))
    assert ":6: nothing may follow the schedule" in _error(_lines(tmp_path, lines + [lines[1]]))


# ---------------------------------------------------------------- synthesis


def test_synth_is_byte_deterministic(tmp_path: Path) -> None:
    args = ["--seed", "7", "--sessions", "2", "--turns", "3", "--prefix-tokens", "400", "--switches", "2"]
    for out in ("a.jsonl", "b.jsonl"):
        result = runner.invoke(cli, ["traces", "synth", str(tmp_path / out), *args])
        assert result.exit_code == 0, result.output
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    other = runner.invoke(cli, ["traces", "synth", str(tmp_path / "c.jsonl"), *args[:1], "8", *args[2:]])
    assert other.exit_code == 0 and (tmp_path / "c.jsonl").read_bytes() != (tmp_path / "a.jsonl").read_bytes()


def test_synth_speaks_the_canary_language() -> None:
    trace = synth_trace(seed=1, sessions=2, turns=3, prefix_tokens=600, switches=1)
    system = trace.prefix.render()
    lines = system.split("\n")
    assert lines[0] == corpus.HEADER and lines[1] == "tools: " + " ".join(corpus.TOOLS)
    assert len(lines) - 2 == corpus.lines_for(600) and all(" = " in d for d in lines[2:])
    defs = lines[2:]
    for s in trace.sessions:
        for t in s.turns:
            recall = t.user.split("\n")[-1]  # every request ends with a canary recall line...
            name = recall.rsplit(" ", 1)[-1]
            assert recall.startswith("turn ") and name.startswith("var_")
            i = next(k for k, d in enumerate(defs) if d.startswith(name + " = "))
            assert t.assistant == corpus.answer(defs, i)  # ...and its recorded answer recites it
    # The mix rotates: code, tool output (sent with the next turn) and prose all appear.
    users = [t.user for s in trace.sessions for t in s.turns]
    assert any("```python" in u for u in users) and any(t.tool_results for s in trace.sessions for t in s.turns)
    assert [p.name for p in trace.schedule.phases] == ["turn-0", "turn-1", "turn-2", "switch-0"]
    assert trace.schedule.phases[-1].requests == (("s2", 0),)


def test_synth_mix_and_bad_options(tmp_path: Path) -> None:
    prose = synth_trace(seed=0, sessions=1, turns=2, prefix_tokens=100, switches=0, mix=["prose"])
    assert not any("```" in t.user or t.tool_results for s in prose.sessions for t in s.turns)
    result = runner.invoke(cli, ["traces", "synth", str(tmp_path / "x.jsonl"), "--mix", "code,poetry"])
    assert result.exit_code == 2 and "unknown mix kind 'poetry'" in result.output
    result = runner.invoke(cli, ["traces", "synth", str(tmp_path / "x.jsonl"), "--restart-after", "turn-9"])
    assert result.exit_code == 2 and "unknown phase 'turn-9'" in result.output


# ---------------------------------------------------------------- inspect


def _rows(output: str) -> list[list[str]]:
    """The body rows of a Rich table as cells."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]


def test_inspect_prints_counts_per_turn(tmp_path: Path) -> None:
    save_trace(small_trace(), tmp_path / "t.jsonl")
    result = runner.invoke(cli, ["traces", "inspect", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    assert "whitespace estimate" in result.output and "restart after: p1" in result.output
    rows = _rows(result.output)
    assert [r[:3] for r in rows] == [["s0", "0", "p0"], ["s0", "1", "p1"], ["s0", "2", "p2"], ["s1", "0", "p0"],
                                     ["s1", "1", "p1"], ["late", "0", "switch"]]
    # s0 turn 1: new input is turn 0's tool output (1 word); prompt = system 5 + u0 + a0 + out0.
    assert rows[1][3:] == ["1", "1", "8"]


def test_inspect_bad_trace_is_one_line(tmp_path: Path) -> None:
    path = _lines(tmp_path, '{"type": "header", "schema": "vmatrix.trace/1", "na')
    result = runner.invoke(cli, ["traces", "inspect", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{path}:1: bad JSON" in lines[0]


def test_inspect_with_a_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `tokenizers` path, with a stand-in module (the package is optional)."""
    import sys
    import types

    class Tok:
        @staticmethod
        def from_file(path: str) -> Tok:
            assert path.endswith("tokenizer.json")
            return Tok()

        def encode(self, text: str, add_special_tokens: bool = True) -> types.SimpleNamespace:
            return types.SimpleNamespace(ids=list(text))  # one "token" per character

    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(Tokenizer=Tok))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tokenizer.json").write_text("{}")
    save_trace(small_trace(), tmp_path / "t.jsonl")
    result = runner.invoke(cli, ["traces", "inspect", str(tmp_path / "t.jsonl"), "--tokenizer", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    assert "chat template not counted" in result.output and "whitespace" not in result.output
    row = _rows(result.output)[1]
    assert row[3:5] == ["4", "2"]  # "out0", "a1"


# ---------------------------------------------------------------- importers


def test_segment_turns_follows_the_agent_loop() -> None:
    msgs = [("user", "u"), ("assistant", "call"), ("tool", "r1"), ("tool", "r2"), ("assistant", "call2"),
            ("tool", "r3"), ("user", "u2"), ("user", "u3")]
    assert segment_turns(msgs) == [Turn("u", "call", ("r1", "r2")), Turn("", "call2", ("r3",)), Turn("u2\n\nu3")]
    assert segment_turns([("user", "u"), ("assistant", "call"), ("tool", "r")]) == [Turn("u", "call", ("r",)), Turn()]


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_import_openai_log(tmp_path: Path) -> None:
    sys_a = {"role": "system", "content": "agent A"}
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}}]}
    a0 = [sys_a, {"role": "user", "content": "fix the bug"}]
    a1 = a0 + [call, {"role": "tool", "tool_call_id": "c1", "content": "file x"}]
    a2 = a1 + [{"role": "assistant", "content": "done"}, {"role": "user", "content": [{"type": "text", "text": "thanks"}]}]
    b0 = [sys_a, {"role": "user", "content": "another agent"}]
    other = [{"role": "system", "content": "agent B"}, {"role": "user", "content": "hi"}]
    rows = [{"model": "m", "messages": a0, "tools": tools}, {"model": "m", "messages": other},
            {"messages": a1, "tools": tools}, {"messages": a1, "tools": tools},  # a retry
            {"messages": b0, "tools": tools},
            {"request": {"messages": a2, "tools": tools}, "response": {"choices": [{"message": {"content": "bye"}}]}}]
    trace, report = import_openai(_jsonl(tmp_path / "log.jsonl", rows))
    assert (report.requests, report.sessions, report.skipped) == (6, 2, 2)
    assert "--group" in report.note
    assert trace.prefix == SharedPrefix(system="agent A", tools=tuple(tools))
    s0, s1 = trace.sessions
    call_text = '<tool_call>\n{"name": "read_file", "arguments": {"path": "x"}}\n</tool_call>'
    assert s0.turns == (Turn("fix the bug", call_text, ("file x",)), Turn("", "done"), Turn("thanks", "bye"))
    assert s1.turns == (Turn("another agent"),)
    # Each logged request comes back as a replayed request with the same conversation.
    wl = trace_to_workload(trace, 8, 2)
    assert [r.key for r in wl.requests] == ["s0/0", "s1/0", "s0/1", "s0/2"]
    roles = [role for role, _ in request_messages(trace, s0, 2)]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    trace_b, _ = import_openai(tmp_path / "log.jsonl", group=1)
    assert trace_b.prefix.system == "agent B" and len(trace_b.sessions) == 1


def test_import_openai_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [\n')
    with pytest.raises(TraceError, match=rf"^{path}:2: bad JSON"):
        import_openai(path)
    _jsonl(path, [{"model": "m", "prompt": "completions, not chat"}])
    with pytest.raises(TraceError, match=rf"^{path}:1: no `messages` array"):
        import_openai(path)


def test_import_sharegpt_json_array(tmp_path: Path) -> None:
    data = [
        {"id": "c/1", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "r1"},
                                         {"from": "human", "value": "q2"}, {"from": "gpt", "value": "r2"}]},
        {"id": "c2", "conversations": [{"from": "gpt", "value": "orphan"}, {"from": "human", "value": "hello"}]},
        {"id": "c3", "conversations": [{"from": "gpt", "value": "only an answer"}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data, indent=2))
    trace, report = import_sharegpt(path)
    assert [s.id for s in trace.sessions] == ["c_1", "c2"] and report.skipped == 1
    assert trace.sessions[0].turns == (Turn("q1", "r1"), Turn("q2", "r2"))
    assert trace.sessions[1].turns == (Turn("hello"),)
    assert [p.name for p in trace.schedule.phases] == ["turn-0", "turn-1"]
    trace, _ = import_sharegpt(path, system="shared", limit=1)
    assert trace.prefix.render() == "shared" and len(trace.sessions) == 1
    path.write_text(json.dumps(data, indent=2)[:-40])
    with pytest.raises(TraceError, match=rf"^{path}:\d+: "):
        import_sharegpt(path)


def test_import_vllm_custom_and_cli(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "custom.jsonl", [{"prompt": "p one"}, {"prompt": "p two"}, {"prompt": "p three"}])
    trace, _ = import_vllm_custom(src, system="S", phase_size=2)
    assert [s.turns for s in trace.sessions] == [(Turn("p one"),), (Turn("p two"),), (Turn("p three"),)]
    assert [(p.name, len(p.requests)) for p in trace.schedule.phases] == [("turn-0.0", 2), ("turn-0.1", 1)]
    (tmp_path / "sys.txt").write_text("S")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(cli, ["traces", "import", "--format", "vllm-custom", str(src), str(out),
                                 "--system-file", str(tmp_path / "sys.txt"), "--phase-size", "2"])
    assert result.exit_code == 0, result.output
    assert load_trace(out) == Trace("custom", trace.prefix, trace.sessions, trace.schedule)
    result = runner.invoke(cli, ["traces", "import", "--format", "csv", str(src), str(out)])
    assert result.exit_code == 2 and "--format must be one of" in result.output
    bad = _jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok"}, {"text": "no prompt"}])
    result = runner.invoke(cli, ["traces", "import", "--format", "vllm-custom", str(bad), str(out)])
    assert result.exit_code == 2 and f"{bad}:2: expected" in result.output


def test_the_api_is_part_of_a_workload_and_its_digest(tmp_path: Path) -> None:
    from vmatrix.jobs.workload import build_workload, workload_digest
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    path = tmp_path / "t.jsonl"
    save_trace(synth_trace(0, 2, 2, 200, 1), path)
    for kind in ({}, {"kind": "trace", "trace": str(path)}):
        chat, completions = WorkloadSpec(**kind), WorkloadSpec(**kind, api="completions")
        assert build_workload(chat).api == "chat" and build_workload(completions).api == "completions"
        # Default chat keeps the digest it had before the API was a choice (pinned in
        # tests/test_lmcache.py); completions is a different experiment.
        assert workload_digest(WorkloadSpec(**kind, api="chat")) == workload_digest(chat) != workload_digest(completions)
