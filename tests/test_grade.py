"""The first grader, fed hand-built transcripts (no engine): identical vs divergent."""

from __future__ import annotations

from jobs.grade import grade_transcripts
from jobs.records import RequestRecord, Transcript


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
    assert verdict == "divergent"
    [bad] = evidence["divergent"]
    assert (bad["key"], bad["index"], bad["control_margin"]) == ("s1/0", 1, 1.5)
    assert bad["cell_tokens"] == [9, 9] and bad["control_tokens"] == [5, 6]
    assert "first at s1/0 token 1" in summary


def test_a_failed_or_missing_request_is_not_clean() -> None:
    verdict, _, evidence = grade_transcripts(tx([1], error="HTTP 500: dead"), tx([1]))
    assert verdict == "divergent" and evidence["divergent"][0]["verdict"] == "missing"
    verdict, _, _ = grade_transcripts(Transcript(), tx([1]))
    assert verdict == "divergent"


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
    assert verdict == "divergent"


def test_many_near_tie_flips_are_more_than_noise() -> None:
    """Recorded shape of the positive control on the CPU engine: most requests flip at ties."""
    control = tx([1, 2], [3, 4], [5, 6], [7, 8])
    for r in control.requests:
        r.margins = [0.03125, 2.0]
    cell = tx([9, 2], [9, 4], [9, 6], [7, 8])
    verdict, summary, _ = grade_transcripts(cell, control, tie_margin=0.04, max_tie_flip_fraction=0.25)
    assert verdict == "divergent" and "3/4 requests flip at near-ties" in summary
    verdict, _, _ = grade_transcripts(tx([9, 2], [3, 4], [5, 6], [7, 8]), control, 0.04, 0.25)
    assert verdict == "clean"
