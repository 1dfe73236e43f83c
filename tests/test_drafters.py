"""The canary drafters (images/canary/build_drafter.py, shipped under images/canary/shipped/):
their checkpoints have the tensors vLLM's DFlash / DFlash2 loaders build, and
`speculative.model: canary:NAME` resolves to them. No engine starts here: whether an engine
serves them is a sweep's result (docs/dflash2.md); the digests are checked with the canary's
in tests/test_canary.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from vmatrix.errors import CanaryError, SpecError
from vmatrix.orchestrator.plan.canary import DRAFTERS, SHIPPED, canary_dir, canary_recipe, draft_dir, model_ref
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.engines import ModelSpec
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.recipe import EngineRecipe


def _header(path: Path) -> dict[str, list[int]]:
    """Tensor shapes from a safetensors file's JSON header (no torch needed)."""
    with path.open("rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}


def _expected(cfg: dict, target: dict) -> dict[str, list[int]]:
    """The checkpoint tensors vLLM 0.32.0 loads for the config, as its modules size them:
    DFlashQwen3Model (fc over len(target_layer_ids) target states, hidden_norm, norm, one
    Qwen3 decoder layer with q/k norms; q/k/v and gate/up unfused, its loader stacks them;
    no embed_tokens or lm_head, so the target's are shared) and, for DFlash2, the
    DFlashGroupedConv pairs of DFlash2Qwen3DecoderLayer and CandidateSelector."""
    h, hd, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    d = cfg["dflash_config"]
    shapes = {"fc.weight": [h, target["hidden_size"] * len(d["target_layer_ids"])],
              "hidden_norm.weight": [h], "norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                   p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                   p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
                   p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                   p + "mlp.down_proj.weight": [h, inter],
                   p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
        if cfg["architectures"] == ["DFlash2DraftModel"]:
            taps, groups = d["conv_kernel_size"], h // d["conv_group_size"]
            for conv in ("attention_conv", "mlp_conv"):
                shapes |= {f"{p}{conv}.base_kernel": [2, taps, h],
                           f"{p}{conv}.kernel_projection.weight": [2 * taps * groups, h]}
    if cfg["architectures"] == ["DFlash2DraftModel"]:
        rank = d["selector_rank"]
        shapes |= {"candidate_selector.predecessor_codebook": [cfg["vocab_size"], rank],
                   "candidate_selector.successor_codebook": [cfg["vocab_size"], rank],
                   "candidate_selector.hidden_projection.weight": [rank, h]}
    return shapes


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_a_shipped_drafter_has_the_tensors_and_config_vllm_loads_for_the_canary(name: str) -> None:
    folder = SHIPPED / name
    recipe = DRAFTERS[name]
    cfg = json.loads((folder / "config.json").read_text())
    target = json.loads((SHIPPED / recipe["target"] / "config.json").read_text())
    arch = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}[recipe["kind"]]
    assert cfg["architectures"] == [arch] and cfg["model_type"] == "qwen3"
    # vLLM shares the target's embedding and lm_head with the drafter: same width and vocabulary.
    assert cfg["hidden_size"] == target["hidden_size"] and cfg["vocab_size"] == target["vocab_size"]
    d = cfg["dflash_config"]
    assert all(0 <= i < target["num_hidden_layers"] for i in d["target_layer_ids"])
    assert 0 <= d["mask_token_id"] < cfg["vocab_size"] and cfg["block_size"] == recipe["block"]
    if arch == "DFlash2DraftModel":
        assert {"selector_top_k", "selector_rank", "conv_kernel_size", "conv_group_size"} <= set(d)
        assert cfg["hidden_size"] % d["conv_group_size"] == 0
    assert _header(folder / "model.safetensors") == _expected(cfg, target)
    # vLLM guesses the speculative method from the drafter's path (docs/dflash2.md).
    assert not any(word in name for word in ("dflash", "eagle-", "eagle3", "dspark"))
    report = json.loads((folder / "drafter-report.json").read_text())
    assert report["after"]["unary"]["accepted"][0] > report["before"]["unary"]["accepted"][0], "training taught it"


def test_speculative_model_canary_ref_resolves_to_the_drafter_and_names_its_recipe(tmp_path: Path) -> None:
    text = """
name: d
engines: [{vllm: "0.32.0", accelerator: cpu}]
model: {canary: tiny-qwen3next}
axes:
  speculative: [off, {method: dflash, num_speculative_tokens: 4, model: "canary:tiny-qwen3next-df1"}]
workloads: [{name: w, prefix_tokens: 400, sessions: 1, turns: 1}]
"""
    plan = expand(parse_spec(text, "m.yaml"), "m.yaml")
    cell = next(c for c in plan.cells if c.knobs["speculative"])
    spec = cell.knobs["speculative"]
    assert spec["model"] == "canary:tiny-qwen3next-df1", "the cell keeps the ref, not a machine's path"
    assert len(spec["model_digest"]) == 16 and spec["model_digest"] in json.dumps(cell.to_json())
    assert draft_dir(cell.knobs) == canary_dir("tiny-qwen3next-df1") == SHIPPED / "tiny-qwen3next-df1"
    argv = engine_argv(Path("python"), EngineRecipe("0.32.0"), cell.knobs, "/m", 8000,
                       draft_model=str(draft_dir(cell.knobs)))
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "num_speculative_tokens": 4, "model": str(SHIPPED / "tiny-qwen3next-df1")}
    assert draft_dir({"speculative": None}) is None
    assert draft_dir({"speculative": {"method": "dflash", "model": "examples/x"}}) is None, "a path is a path"
    assert canary_recipe("tiny-qwen3next-df1")["args"]["target"] == "tiny-qwen3next"

    with pytest.raises(SpecError, match="speculative.model: unknown drafter 'canary:nope'"):
        expand(parse_spec(text.replace("tiny-qwen3next-df1", "nope"), "m.yaml"), "m.yaml")
    with pytest.raises(CanaryError, match="is a drafter"):
        model_ref(ModelSpec(canary="tiny-qwen3next-df1"))
