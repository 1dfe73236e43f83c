"""Grading and coverage per shape (jobs/shape_grade.py), on transcripts built here from a
shaped workload's requests: the control answers every request as its expectation says,
and the cell's answers, prefix hits and counters are set by each test (recorded-transcript
stand-ins, built here). No engine runs; the real-engine side is tests/test_sweep_e2e.py.
Most tests hold the first layout (version 1, as recorded runs were laid out); the ones
about the block drop and repeats use today's."""

from __future__ import annotations

import json

from vmatrix.jobs.grade import Exercised, grade_transcripts
from vmatrix.jobs.shape_grade import Placed, Shaped
from vmatrix.jobs.shapes import fragments
from vmatrix.jobs.workload import build_workload
from vmatrix.orchestrator.spec.workload import WorkloadSpec
from vmatrix.records import RequestRecord, Transcript
from vmatrix.workload import Workload

BLOCK = 384
SPEC = WorkloadSpec(shapes=[{"kind": "cold_race"}, {"kind": "cold_race", "name": "same", "identical": True},
                            {"kind": "decode_cross", "prompts": 4}, {"kind": "spec_tail"}])
WORKLOAD = build_workload(SPEC, BLOCK, 1)
END = 2  # the canary's <|im_end|>
SPEC_DRAFTS = "vllm:spec_decode_num_draft_tokens_total"


def _placed(workload: Workload = WORKLOAD, spec: WorkloadSpec = SPEC) -> dict[str, Placed]:
    kinds = {s.name: s.kind for s in spec.shapes}
    return {r.key: Placed(r.shape, kinds[r.shape], r.phase, r.claim, json.dumps(r.messages), r.repeat)
            for r in workload.requests}


def _run(wrong: dict[str, str] | None = None, hits: bool = True, drafted: float = 0.0,
         workload: Workload = WORKLOAD, drop: bool = False) -> Transcript:
    """A run of the workload: each request answers its expectation (or ``wrong[key]``), with
    the prefix hit its claim asks for (or none; with ``drop`` a block lower, none where that
    is no block: a speculative engine's block drop), 24 generated tokens."""
    wrong = wrong or {}
    requests = []
    for r in workload.requests:
        text = wrong.get(r.key, r.expect.value)
        ids = [100, END] + [7] * 22
        claim = r.claim
        requests.append(RequestRecord(
            r.key, r.session, r.turn, r.phase, prompt_tokens=claim.prompt_tokens, token_ids=ids,
            logprobs=[-0.01] * len(ids), margins=[5.0] * len(ids), text=text + "<junk>", answer_chars=len(text),
            expect=r.expect, cached_tokens=_hit(claim.hit_at, drop) if hits else 0))
    phases = {r.phase for r in workload.requests}
    counters = {SPEC_DRAFTS: drafted, "vllm:spec_decode_num_accepted_tokens_total": drafted / 2,
                "vllm:prefix_cache_hits_total": 100.0}
    return Transcript(requests, {p: dict(counters) for p in phases})


def _hit(hit_at: int | None, drop: bool) -> int:
    if not hit_at:
        return 0
    return max(0, hit_at - BLOCK) if drop else hit_at


def _grade(cell: Transcript, control: Transcript, speculative: bool = False, budget: int | None = 2048,
           workload: Workload = WORKLOAD, spec: WorkloadSpec = SPEC):
    race = [s for s in spec.shapes if s.kind == "cold_race"]
    shaped = Shaped(_placed(workload, spec), BLOCK, 2 if speculative else None,
                    {s.name: fragments(s, BLOCK, budget, None) for s in race})
    return grade_transcripts(cell, control, exercised=Exercised(prefix_caching=True, speculative=speculative),
                             shaped=shaped, end_tokens=frozenset({END}))


def test_a_healthy_cell_is_clean_with_each_shape_exercised() -> None:
    verdict, summary, evidence = _grade(_run(), _run())
    assert verdict == "clean", summary
    shapes = evidence["shapes"]
    assert set(shapes) == {"cold_race", "same", "decode_cross", "spec_tail"}
    assert shapes["cold_race"]["coverage"]["hits"]["reached"] == 16
    assert shapes["decode_cross"]["coverage"]["decode_crossed"] == 4
    assert shapes["cold_race"]["coverage"]["fragments"] is True


def test_lines_lost_inside_the_last_restored_block_make_the_shape_corrupt_and_say_where() -> None:
    """As vLLM 0.25.1 with MTP on the H200: resends that hit lose the lines in the last
    restored block; 3 flips are within vLLM's margin (reverse 0 + 2), 4 are not."""
    resends = [r for r in WORKLOAD.requests if r.shape == "cold_race" and r.turn == 1 and r.claim.probe == "before"]
    assert len(resends) >= 4
    loops = {r.key: r.expect.value.split(" = ")[0] + " = build build file file" for r in resends[:4]}
    # The tokens are left as the control's, so that only what the answers say can tell: 4 of
    # 16 is not beyond noise for the whole cell (p = 1/16), and is beyond the shape's margin.
    verdict, summary, evidence = _grade(_run(loops), _run())
    assert verdict == "corrupt"
    assert summary.startswith("shape cold_race: recall 28/32 against the control's 32: 4 answers"), summary
    assert "before 2/6 (control 6)" in summary and "at 5/5" in summary, "says where the lost lines lie"
    recall = evidence["shapes"]["cold_race"]
    assert len(recall["flips"]) == 4 and recall["reverse"] == 0
    assert recall["by_probe"]["before"]["cell"] == recall["by_probe"]["before"]["control"] - 4


def test_the_shape_rule_allows_reverse_flips_plus_two() -> None:
    resends = [r for r in WORKLOAD.requests if r.shape == "cold_race" and r.turn == 1]
    # Same tokens as the control, so only recall can see it: 2 flips, none the other way.
    verdict, summary, evidence = _grade(_run({r.key: "var_0000 = nothing" for r in resends[:2]}), _run())
    assert verdict == "clean", summary
    assert len(evidence["shapes"]["cold_race"]["flips"]) == 2
    verdict, summary, _ = _grade(_run({r.key: "var_0000 = nothing" for r in resends[:3]}), _run())
    assert verdict == "corrupt" and "allowed: 0 + 2" in summary


def test_more_distinct_answers_to_one_prompt_than_the_control_plus_one_is_corrupt() -> None:
    same = [r for r in WORKLOAD.requests if r.shape == "same" and r.turn == 0]
    # Three requests of the one prompt answer three different ways (the control: one way),
    # each still "right" by recall rules for none of them: a race handed out different states.
    wrong = {r.key: f"{r.expect.value.split(' = ')[0]} = alpha{n}" for n, r in enumerate(same[:3])}
    wrong[same[3].key] = same[3].expect.value  # one right
    verdict, _, evidence = _grade(_run(wrong), _run())
    assert verdict == "corrupt"
    assert evidence["shapes"]["same"]["distinct"]["cell"] >= 3 and evidence["shapes"]["same"]["distinct"]["control"] == 1


def test_no_hit_at_the_restore_point_is_unexercised_naming_the_shape() -> None:
    verdict, _, evidence = _grade(_run(hits=False), _run())
    assert verdict == "unexercised"
    gaps = evidence["coverage"]["gaps"]
    assert any(g.startswith("cold_race: no request hit the restore point") for g in gaps), gaps
    assert any(g.startswith("decode_cross: no request hit") for g in gaps)


def test_a_budget_that_cannot_fragment_the_race_is_a_gap_and_an_unknown_one_unmeasured() -> None:
    verdict, _, evidence = _grade(_run(), _run(), budget=1 << 20)
    assert verdict == "unexercised"
    assert "cold_race: the token budget fits every concurrent prompt" in " ".join(evidence["coverage"]["gaps"])
    verdict, summary, evidence = _grade(_run(), _run(), budget=None)
    assert verdict == "partial" and "not measured: " in summary
    assert any("token budget is its default" in u for u in evidence["coverage"]["unmeasured"])


def test_spec_tail_needs_a_draft_and_a_resend_of_one_plus_k_tokens_past_a_hit() -> None:
    verdict, summary, evidence = _grade(_run(drafted=0.0), _run(), speculative=True)
    assert verdict == "unexercised" and "spec_tail: no token drafted" in summary
    verdict, summary, evidence = _grade(_run(drafted=40.0), _run(), speculative=True)
    assert verdict == "clean", summary
    assert evidence["shapes"]["spec_tail"]["coverage"]["tail_of_1_plus_k"] == 2  # m = 1, 2 with t = 3


def test_prompts_of_another_length_than_laid_out_are_a_gap() -> None:
    cell = _run()
    for r in cell.requests:
        r.prompt_tokens += 5  # another template: every position is off
    verdict, summary, _ = _grade(cell, _run())
    assert verdict == "unexercised" and "not the length they were laid out for" in summary


def test_a_cell_laid_out_on_another_block_than_its_control_is_not_graded_against_it() -> None:
    from vmatrix.orchestrator.sweep.grading import layout_mismatch
    from vmatrix.records import Layout

    mine, theirs = _run(), _run()
    mine.layout = Layout(384, "engine", 384, (), "a" * 64)
    theirs.layout = Layout(768, "engine", 768, (), "b" * 64)
    why = layout_mismatch(mine, theirs)
    assert why is not None and "768-token blocks (engine), this cell's on 384" in why and "probe_block_tokens" in why
    theirs.layout = Layout(384, "engine", 384, (), "a" * 64)
    assert layout_mismatch(mine, theirs) is None


def test_hits_are_counted_per_shape_for_the_45238_finding() -> None:
    """Constructed runs: with speculative decoding the cold race hits nothing, without it 16
    resends hit; the other shapes hit in both."""
    from vmatrix.orchestrator.sweep.grading import _hits_by_place

    spec_on, spec_off = _run(), _run()
    for r in spec_on.requests:
        if r.phase.startswith("cold_race/"):
            r.cached_tokens = 0
    by = _hits_by_place(SPEC, spec_on, spec_off)
    assert by["shape cold_race"] == (0, 16 * BLOCK)
    assert by["shape same"][0] == by["shape same"][1] > 0


def test_hits_a_block_lower_under_mtp_count_as_reached_and_say_what_was_not_asked() -> None:
    """Constructed run: every resend of the decode-cross shape (laid out for 768) hits 384,
    as vLLM's EAGLE/MTP block drop restores one block lower: reached, and no asked line
    lies inside the restored block (they were placed against 768): unmeasured, named."""
    cell = _run(drafted=40.0)
    for r in cell.requests:
        if r.phase == "decode_cross/resend":
            r.cached_tokens = 2 * BLOCK - BLOCK
    verdict, summary, evidence = _grade(cell, _run(), speculative=True)
    assert verdict == "partial" and "decode_cross: no asked line lies inside" in summary, "not a bare clean"
    hits = evidence["shapes"]["decode_cross"]["coverage"]["hits"]
    assert hits["reached"] == hits["block_drop"] == 4
    assert any(u.startswith("decode_cross: no asked line lies inside the block its hit restored")
               for u in evidence["coverage"]["unmeasured"])


# Today's layout: requests for the block drop, and repeats.
SPEC2 = WorkloadSpec(shapes=[{"kind": "cold_race"}, {"kind": "decode_cross", "prompts": 4},
                             {"kind": "agent", "prefix_tokens": 1500, "sessions": 3, "turns": 3, "agent_switches": 1}])
WORKLOAD2 = build_workload(SPEC2, BLOCK)


def test_under_the_block_drop_a_healthy_speculative_cell_is_clean_having_asked_the_restored_blocks() -> None:
    """Every hit a block lower than laid out (a speculative engine): the requests laid out
    for that restore point ask lines inside it, so nothing is left unmeasured."""
    verdict, summary, evidence = _grade(_run(drafted=40.0, workload=WORKLOAD2, drop=True),
                                        _run(workload=WORKLOAD2), speculative=True, workload=WORKLOAD2, spec=SPEC2)
    assert verdict == "clean", summary
    assert not evidence["coverage"]["unmeasured"]
    for shape in ("cold_race", "decode_cross", "agent"):
        by_probe = evidence["shapes"][shape]["by_probe"]
        assert by_probe.get("before", {}).get("requests", 0) > 0, (shape, by_probe)
    assert evidence["shapes"]["cold_race"]["coverage"]["hits"]["block_drop"] == 16, "the race a block longer"


def test_under_the_block_drop_lines_lost_inside_the_restored_block_are_corrupt() -> None:
    """A speculative engine whose restored state is wrong: the lines inside the block its
    hit restored come back wrong; the grader sees it through the requests laid out for it."""
    cell = _run(drafted=40.0, workload=WORKLOAD2, drop=True)
    lost = {}
    for r, rec in zip(WORKLOAD2.requests, cell.requests, strict=True):
        if r.session.endswith(".drop") and r.claim.probe == "before":
            lost[r.key] = r.expect.value.split(" = ")[0] + " = build build file file"
    assert len(lost) >= 4
    verdict, summary, evidence = _grade(_run(lost, drafted=40.0, workload=WORKLOAD2, drop=True),
                                        _run(workload=WORKLOAD2), speculative=True, workload=WORKLOAD2, spec=SPEC2)
    assert verdict == "corrupt", summary
    flipped = {k for s in evidence["shapes"].values() for k in s["flips"]}
    assert flipped == set(lost)


def test_repeats_are_counted_one_by_one() -> None:
    spec = WorkloadSpec(shapes=[{"kind": "cold_race", "repeat": 3, "block_drop": False}])
    workload = build_workload(spec, BLOCK)
    resends = [r for r in workload.requests if r.turn == 1]
    # Wrong in repeats 1 and 3: one answer, then two.
    wrong = {r.key: "var_0000 = nothing" for r in [resends[0]] + [r for r in resends if r.repeat == 2][:2]}
    ok = _run(workload=workload)
    verdict, summary, evidence = _grade(_run(wrong, workload=workload), ok, workload=workload, spec=spec)
    assert verdict == "corrupt"
    assert evidence["repeats"]["cold_race"] == [{"repeat": 1, "requests": 32, "wrong": 1},
                                                {"repeat": 2, "requests": 32, "wrong": 0},
                                                {"repeat": 3, "requests": 32, "wrong": 2}]
    assert summary.endswith("; repeats: cold_race wrong in 2 of 3 repeats (1-2 answer(s) each)"), summary
    verdict, summary, evidence = _grade(ok, ok, workload=workload, spec=spec)
    assert verdict == "clean" and summary.endswith("; repeats: cold_race right in all 3 repeats")
