"""Matrix expansion and cell identity (content hashes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.errors import SpecError
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec

BASE = """\
name: t
engines:
  - vllm: "0.32.0"
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
"""


def plan(text: str):
    return expand(parse_spec(text, "t.yaml"), "t.yaml")


def test_quickstart_shape_has_one_control_and_three_graded_cells() -> None:
    p = plan(BASE)
    assert len(p.cells) == 4
    [control] = p.controls
    assert control.knobs["prefix_caching"] is False and control.knobs["speculative"] is None
    assert p.cells[0] is control, "controls come first so grading can start early"
    assert all(c.control_id == control.id for c in p.cells[1:])
    # What the store records of a cell reads back as the same cell (results regrade uses it).
    from vmatrix.cells import Cell

    assert all(Cell.from_json(c.to_json()) == c for c in p.cells)


def test_ids_are_stable_and_depend_on_every_input() -> None:
    ids = {c.id for c in plan(BASE).cells}
    assert ids == {c.id for c in plan(BASE).cells}
    variants = [
        BASE.replace('"0.32.0"', '"0.31.0"'),
        BASE.replace("num_speculative_tokens: 2", "num_speculative_tokens: 3"),
        BASE + "workloads:\n  - {prefix_tokens: 999}\n",
    ]
    for text in variants:
        assert ids.isdisjoint({c.id for c in plan(text).cells if c.knobs["speculative"]}), text


def test_exclude_and_include() -> None:
    text = BASE + (
        "exclude:\n  - {prefix_caching: true, speculative: {method: mtp, num_speculative_tokens: 2}}\n"
        "include:\n  - {block_size: 64, prefix_caching: true}\n"
    )
    cells = plan(text).cells
    combos = {(c.knobs["prefix_caching"], bool(c.knobs["speculative"]), c.knobs["block_size"]) for c in cells}
    assert (True, True, None) not in combos
    assert (True, False, 64) in combos
    # The included cell's control is added: same knobs but prefix caching off.
    assert (False, False, 64) in combos


def test_control_outside_the_matrix_is_added() -> None:
    p = plan(BASE.replace("prefix_caching: [false, true]", "prefix_caching: [true]"))
    assert len(p.controls) == 1 and p.controls[0].knobs["prefix_caching"] is False


def test_patch_set_content_changes_the_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_PATCHES_DIR", str(tmp_path))
    (tmp_path / "fix").mkdir()
    patch = tmp_path / "fix" / "0001-x.patch"
    patch.write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    text = BASE.replace('"0.32.0"', '"0.32.0"\n    patches: fix')
    before = {c.id for c in plan(text).cells}
    patch.write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+c\n")
    assert before.isdisjoint({c.id for c in plan(text).cells})


def test_missing_patch_set_is_a_spec_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_PATCHES_DIR", str(tmp_path))
    with pytest.raises(SpecError, match=r"engines\[0\]\.patches: no patch set 'nope'"):
        plan(BASE.replace('"0.32.0"', '"0.32.0"\n    patches: nope'))


def test_unknown_canary() -> None:
    with pytest.raises(SpecError, match="unknown canary 'big'"):
        plan(BASE.replace("tiny-qwen3next", "big"))
