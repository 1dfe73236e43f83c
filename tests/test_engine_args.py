"""Knobs -> argv: always an argument vector, version-aware where defaults differ."""

from __future__ import annotations

import json
from pathlib import Path

from vmatrix.orchestrator.spec.knobs import Knobs
from vmatrix.orchestrator.stack.engine_args import engine_argv, engine_env
from vmatrix.recipe import EngineRecipe

PY = Path("/venv/bin/python")


def argv(**knobs):
    return engine_argv(PY, EngineRecipe(vllm="0.32.0"), Knobs(**knobs).canonical(), "/m", 8000)


def test_prefix_caching_off_is_said_out_loud_on_v1() -> None:
    assert "--no-enable-prefix-caching" in argv()
    assert "--enable-prefix-caching" in argv(prefix_caching=True)
    old = engine_argv(PY, EngineRecipe(vllm="0.6.0"), Knobs().canonical(), "/m", 1)
    assert not any("prefix-caching" in a for a in old)


def test_speculative_config_is_one_json_argument() -> None:
    a = argv(speculative={"method": "mtp", "num_speculative_tokens": 2})
    assert json.loads(a[a.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 2}


def test_knobs_and_extra_args_are_separate_list_items() -> None:
    a = argv(block_size=800, max_num_batched_tokens=1536, mamba_cache_mode="align",
             extra_args=("--gdn-prefill-backend", "triton"))
    assert a[:3] == [str(PY), "-m", "vllm.entrypoints.openai.api_server"]
    for flag, value in (("--block-size", "800"), ("--max-num-batched-tokens", "1536"), ("--mamba-cache-mode", "align")):
        assert a[a.index(flag) + 1] == value
    assert a[-2:] == ["--gdn-prefill-backend", "triton"]
    assert all(isinstance(x, str) and x for x in a)


def test_cpu_engines_do_not_pin_each_other_to_the_same_cores() -> None:
    env = engine_env(EngineRecipe(vllm="0.32.0"), cpus=2)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and env["OMP_NUM_THREADS"] == "2"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env(EngineRecipe(vllm="0.26.0", accelerator="cuda"), cpus=2)


def test_a_gated_workload_starts_its_engine_with_the_pause_routes() -> None:
    from vmatrix.orchestrator.stack.engine_args import gates

    assert gates({"shapes": [{"kind": "cold_race", "gate": True}]})
    assert not gates({"shapes": [{"kind": "cold_race"}]}) and not gates({"shapes": None})
    assert engine_env(EngineRecipe(vllm="0.32.0"), cpus=1, gated=True)["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in engine_env(EngineRecipe(vllm="0.32.0"), cpus=1)
