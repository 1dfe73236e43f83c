"""Expectations (vmatrix/expect.py) on hand-written answers: exact, regex, tool call, JSON form."""

from __future__ import annotations

import pytest

from vmatrix.expect import Expectation, tool_calls


def test_exact_compares_stripped_text_and_an_unfinished_answer_is_wrong() -> None:
    e = Expectation.exact("var_12 = alpha omega")
    assert e.matches("var_12 = alpha omega") and e.matches("\n var_12 = alpha omega \n")
    assert not e.matches("var_12 = alpha omega delta") and not e.matches("var_12 = alpha")
    assert not e.matches(None)  # cut by max_tokens before the end token


def test_regex_must_match_the_whole_answer() -> None:
    e = Expectation.regex(r"var_\d+ = (alpha|beta)( \w+)*")
    assert e.matches(" var_7 = beta omega\n") and not e.matches("say var_7 = beta")
    assert Expectation.regex(r"(?s).*var_7.*").matches("first\nvar_7 = x\nlast")
    with pytest.raises(ValueError, match="bad pattern"):
        Expectation.from_json({"regex": "("})


def test_tool_call_compares_name_and_parsed_arguments() -> None:
    e = Expectation.tool_call("read_file", {"path": "a.py", "lines": [1, 2]})
    spaced = '<tool_call>\n{"name": "read_file", "arguments": {"lines": [1, 2], "path": "a.py"}}\n</tool_call>'
    assert e.matches(spaced)
    # Arguments as a JSON string (some chat templates encode them so) are parsed too.
    assert e.matches('<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\", \\"lines\\": [1, 2]}"}</tool_call>')
    assert not e.matches(spaced.replace("a.py", "b.py"))
    assert not e.matches(spaced.replace("read_file", "write_file"))
    assert not e.matches('<tool_call>{"name": "read_file", "arguments": {broken</tool_call>')
    # The first call counts.
    other = '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>'
    assert not e.matches(other + spaced) and e.matches(spaced + other)
    assert tool_calls("no call here") == []


def test_json_form_round_trips_and_is_checked() -> None:
    for e in (Expectation.exact("x = 1"), Expectation.regex("a+"), Expectation.tool_call("run_tests", {"k": "v"}),
              Expectation.tool_call("git_diff")):
        assert Expectation.from_json(e.to_json()) == e
    assert Expectation.from_json("plain text") == Expectation.exact("plain text")
    assert Expectation.tool_call("f", {"b": 1, "a": 2}) == Expectation.tool_call("f", {"a": 2, "b": 1})
    for bad, message in (({"exact": 3}, "must be a string"), ({"fuzzy": "x"}, "unknown expectation kind"),
                         ({"exact": "a", "regex": "b"}, "must be a string or one of"),
                         ({"tool_call": {"arguments": {}}}, "tool_call must be"),
                         ({"tool_call": {"name": "f", "arguments": [1]}}, "must be a JSON object")):
        with pytest.raises(ValueError, match=message):
            Expectation.from_json(bad)
