"""The path trap (docs/dflash2.md, "(A)"): vLLM takes the speculative method from the draft
model's path when it names one, over the method asked for, and for MTP the draft model is
the target. vmatrix serves a canary from a folder whose path names no other method, and
refuses a user's folder that does, naming the field. Real files and the real planner; no
engine (the run that met the trap is the recorded one of docs/dflash2.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vmatrix.errors import SpecError
from vmatrix.orchestrator.plan.canary import META, canary_dir, served_paths
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.stack.engine_args import path_trap


@pytest.mark.parametrize(("path", "method", "word"), [
    ("/work/wt-dflash/images/canary/shipped/tiny-qwen3next", "mtp", "dflash"),
    ("/work/wt-dflash/images/canary/shipped/tiny-qwen3next", "dflash", None),
    ("/models/z-lab/Qwen3-8B-DFlash-b16", "dflash", None),
    ("/models/EAGLE3-LLaMA3.1-8B", "eagle", None),  # one family
    ("/models/yuhuili/EAGLE-LLaMA3-8B", "eagle3", None),
    ("/models/eagle-drafter", "dflash", "eagle-"),
    ("/models/dspark-head", "mtp", "dspark"),
    ("/models/qwen3-next-mtp", "mtp", None),
])
def test_the_words_vllm_reads_a_method_from(path: str, method: str, word: str | None) -> None:
    assert path_trap(path, method) == word


def _matrix(model: str, spec: str) -> str:
    return f"""
name: trap
engines: [{{vllm: "0.32.0", accelerator: cpu}}]
model: {model}
axes:
  speculative: [off, {spec}]
control: {{speculative: off}}
workloads: [{{name: w, prefix_tokens: 64, sessions: 1, turns: 1, max_tokens: 4}}]
"""


def _model_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_an_mtp_cell_on_a_users_folder_that_names_another_method_is_refused(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path / "eagle-qwen3next")
    text = _matrix(f"{{path: {folder}}}", "{method: mtp, num_speculative_tokens: 2}")
    with pytest.raises(SpecError, match=r"t.yaml: model.path: vLLM would read 'eagle-' in .*eagle-qwen3next"):
        expand(parse_spec(text, "t.yaml"), "t.yaml")


def test_a_drafter_folder_is_refused_only_when_it_names_another_method(tmp_path: Path) -> None:
    model = _model_folder(tmp_path / "target")
    drafter = _model_folder(tmp_path / "my-dflash-drafter")
    ok = _matrix(f"{{path: {model}}}", f"{{method: dflash, num_speculative_tokens: 4, model: {drafter}}}")
    assert len(expand(parse_spec(ok, "t.yaml"), "t.yaml").cells) == 2
    wrong = _matrix(f"{{path: {model}}}", f"{{method: eagle, num_speculative_tokens: 4, model: {drafter}}}")
    with pytest.raises(SpecError, match="speculative.model: vLLM would read 'dflash'"):
        expand(parse_spec(wrong, "t.yaml"), "t.yaml")


def test_a_canary_in_a_checkout_that_names_a_method_is_served_from_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    checkout = tmp_path / "wt-dflash" / "tiny-qwen3next"
    shutil.copytree(canary_dir("tiny-qwen3next"), checkout)
    assert (checkout / META).is_file()
    mtp = {"speculative": {"method": "mtp", "num_speculative_tokens": 2}}
    model, draft = served_paths(str(checkout), "canary:tiny-qwen3next", mtp)
    assert draft is None and path_trap(model, "mtp") is None
    assert Path(model).is_relative_to(tmp_path / "cache")
    assert (Path(model) / "config.json").read_bytes() == (checkout / "config.json").read_bytes()
    # Not moved where nothing is wrong: no speculation, or a method the path agrees with.
    assert served_paths(str(checkout), "canary:tiny-qwen3next", {"speculative": None}) == (str(checkout), None)
    dflash = {"speculative": {"method": "dflash", "num_speculative_tokens": 4, "model": "canary:tiny-qwen3next-df1"}}
    assert served_paths(str(checkout), "canary:tiny-qwen3next", dflash)[0] == str(checkout)


def test_a_cache_folder_that_names_a_method_is_refused_naming_the_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "dspark-cache"))
    text = _matrix("{canary: tiny-qwen3next}", "{method: mtp, num_speculative_tokens: 2}")
    expand(parse_spec(text, "t.yaml"), "t.yaml")  # the checkout's own path is fine: served from there
    docker = text + "runtime: docker\n"
    with pytest.raises(SpecError, match="VMATRIX_CACHE: .*dspark-cache contains 'dspark'"):
        expand(parse_spec(docker, "t.yaml"), "t.yaml")
