"""A torch the offline host lacks, staged as an overlay for the engine only (issue 43).

Small fake parts stand in for the real ones (torch 2.13.0 is 527 MB): a "torch" package
with a shared library holding a fat binary for six GPU architectures, a triton with
Blackwell's ptxas, an NCCL library. What is tested: the fat-binary blanking keeps exactly
what an sm_90 GPU loads; the overlay is built without what the engine never loads; it
travels in checked volumes and is complete only when its last one is in; an engine
environment of a release that pins another torch refuses to build without the overlay,
or when the overlay's check on the host fails, and otherwise records `torch X (staged)`
and gives the engine, and only the engine, the overlay first on its PYTHONPATH.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from vmatrix.errors import EnvBuildError
from vmatrix.images import fatbin, overlay, volumes
from vmatrix.orchestrator.runtimes import venvs
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.runtimes.venvs import ensure_env, with_overlay
from vmatrix.recipe import EngineRecipe

# (kind, sm) of each entry of the fake fat binary; an sm_90 GPU loads the sm_90 cubin and
# PTX of sm <= 90, nothing else (a cubin runs only on its own major version).
ENTRIES = [(2, 75), (2, 80), (2, 86), (2, 90), (2, 100), (1, 80), (1, 120), (2, 120)]
LOADS_ON_90 = {(2, 90), (1, 80)}


def _fat(entries: list[tuple[int, int]]) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """A fat binary container; also (payload offset in it, length, payload) per entry."""
    body, spots = b"", []
    for n, (kind, sm) in enumerate(entries):
        payload = bytes([0x30 + n]) * (40 + 8 * n)
        head = bytearray(64)
        struct.pack_into("<HHIQI", head, 0, kind, 0x0101, 64, len(payload), len(payload))
        struct.pack_into("<I", head, 28, sm)
        spots.append((16 + len(body) + 64, len(payload), payload))
        body += bytes(head) + payload
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body, spots


def _library() -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """An ELF-looking library: code, a false magic (the magic number followed by junk), a
    real container, more code."""
    fat, spots = _fat(ENTRIES)
    head = b"\x7fELF" + b"\x11" * 100 + struct.pack("<I", fatbin.MAGIC) + b"\x22" * 60
    return head + fat + b"\x33" * 50, [(len(head) + at, n, p) for at, n, p in spots]


def test_blanking_zeroes_exactly_what_an_sm90_gpu_cannot_load(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    data, spots = _library()
    lib.write_bytes(data)
    assert fatbin.archs(lib) == {e: len(p) for e, (_, _, p) in zip(ENTRIES, spots, strict=True)}
    zeroed = fatbin.blank_others(lib, 90)
    after = lib.read_bytes()
    assert len(after) == len(data)
    for entry, (at, n, payload) in zip(ENTRIES, spots, strict=True):
        assert after[at:at + n] == (payload if entry in LOADS_ON_90 else bytes(n)), entry
    assert zeroed == sum(n for e, (_, n, _) in zip(ENTRIES, spots, strict=True) if e not in LOADS_ON_90)
    # Everything outside the payloads, headers and the false magic's junk included, is as it was.
    kept = bytearray(after)
    for entry, (at, n, payload) in zip(ENTRIES, spots, strict=True):
        kept[at:at + n] = payload
    assert bytes(kept) == data
    assert fatbin.blank_others(lib, 90) == 0  # nothing left to blank


def test_a_container_that_does_not_parse_is_left_alone(tmp_path: Path) -> None:
    fat, _ = _fat(ENTRIES)
    broken = bytearray(fat)
    struct.pack_into("<Q", broken, 8, len(fat) * 10)  # claims to run past the file's end
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF" + bytes(broken))
    assert fatbin.blank_others(lib, 90) == 0
    assert lib.read_bytes() == b"\x7fELF" + bytes(broken)


def _wheel(folder: Path, dist: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = (),
           modes: dict[str, int] | None = None) -> Path:
    name = f"{dist.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = files | {f"{name}.dist-info/METADATA": meta.encode(),
                     f"{name}.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp312-cp312-linux_x86_64\n"}
    record = [f"{rel},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for rel, d in files.items()] + [f"{name}.dist-info/RECORD,,"]
    path = folder / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            info = zipfile.ZipInfo(rel)
            info.external_attr = ((modes or {}).get(rel, 0o644) | 0o100000) << 16
            zf.writestr(info, data)
        zf.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


FAKE_TORCH = b"""__version__ = '9.13.0'
class cuda:
    @staticmethod
    def is_available():
        return False
"""


def _overlay_wheels(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    lib, _ = _library()
    return [
        _wheel(folder, "torch", "9.13.0", {"torch/__init__.py": FAKE_TORCH, "torch/lib/libtorch_cuda.so": lib,
                                            "torch/include/ATen/ATen.h": b"// headers", "torch/bin/torch_shm_manager": b"\x7fELF shm"},
               modes={"torch/bin/torch_shm_manager": 0o755}),
        _wheel(folder, "triton", "9.7.1", {"triton/__init__.py": b"__version__ = '9.7.1'\n",
                                            "triton/backends/nvidia/bin/ptxas": b"\x7fELF ptxas",
                                            "triton/backends/nvidia/bin/ptxas-blackwell": b"\x7fELF sm100"},
               modes={"triton/backends/nvidia/bin/ptxas": 0o755}),
        _wheel(folder, "nvidia-nccl-cu13", "9.29.7", {"nvidia/nccl/lib/libnccl.so.2": lib, "nvidia/nccl/include/nccl.h": b"//"}),
    ]


def test_the_overlay_holds_what_the_engine_loads_blanked_for_its_gpu(tmp_path: Path) -> None:
    dest = tmp_path / "_torch-9.13.0"
    manifest = overlay.build(dest, _overlay_wheels(tmp_path / "wheels"), sm=90)
    assert manifest["torch"] == "9.13.0" and manifest["packages"] == {
        "torch": "9.13.0", "triton": "9.7.1", "nvidia-nccl-cu13": "9.29.7"}
    assert (dest / "torch" / "__init__.py").read_bytes() == FAKE_TORCH
    assert os.access(dest / "torch" / "bin" / "torch_shm_manager", os.X_OK)
    assert os.access(dest / "triton" / "backends" / "nvidia" / "bin" / "ptxas", os.X_OK)
    for cut in ("torch/include", "triton/backends/nvidia/bin/ptxas-blackwell", "nvidia/nccl/include"):
        assert not (dest / cut).exists(), cut
    assert set(manifest["blanked_bytes"]) == {"torch/lib/libtorch_cuda.so", "nvidia/nccl/lib/libnccl.so.2"}
    assert set(fatbin.archs(dest / "torch" / "lib" / "libtorch_cuda.so")) == set(ENTRIES)  # headers kept
    assert overlay.read(dest)["env"] == overlay.ENV
    with pytest.raises(ValueError, match="not a torch overlay"):
        overlay.read(tmp_path)


def test_the_check_fails_on_a_host_without_a_gpu_and_says_why(tmp_path: Path) -> None:
    dest = tmp_path / "_torch-9.13.0"
    overlay.build(dest, _overlay_wheels(tmp_path / "wheels"))
    ok, line = overlay.check(dest)
    assert not ok and "torch 9.13.0: no CUDA device" in line
    assert overlay.checked(dest) == (False, line)
    assert overlay.main(["check", str(dest)]) == 1


# What the real probe checks beyond the import needs a GPU; on this CPU the test's probe
# stops after the import, where the real one would go on to the GPU.
REAL_PROBE = overlay._PROBE
PROBE_WITHOUT_GPU = REAL_PROBE.split("assert torch.cuda.is_available()")[0] + "print(f'torch {torch.__version__} from the overlay')\n"


def _staged_release(wheelhouse: Path, pin: str) -> Path:
    folder = wheelhouse / "vllm-9.27.1"
    folder.mkdir(parents=True)
    _wheel(folder, "vllm", "9.27.1", {"fake_engine.py": b"import torch\nWHERE = torch.__file__\n"},
           requires=(f"torch=={pin}", "numpy", "torchvision==9.28.0 ; extra == 'video'"))
    return folder


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheelhouse of a release pinning torch 9.13.0, on a host whose torch is 2.11.0+cu130,
    with the overlay sent in volumes and all of them applied."""
    wh = tmp_path / "wh"
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VMATRIX_WHEELHOUSE", str(wh))
    monkeypatch.setattr(venvs, "host_torch", lambda: "2.11.0+cu130")
    monkeypatch.setattr(overlay, "_PROBE", PROBE_WITHOUT_GPU)
    _staged_release(wh, "9.13.0")
    overlay.build(tmp_path / "src" / "_torch-9.13.0", _overlay_wheels(tmp_path / "wheels"))
    ups = volumes.pack([tmp_path / "src" / "_torch-9.13.0"], tmp_path / "up", 2_000, jobs=1, preset=1, lane_bytes=2_000)
    assert len(ups) > 1
    volumes.apply(ups, wh)
    return wh


def test_a_release_pinning_another_torch_runs_on_the_overlay_and_records_it(host: Path, tmp_path: Path) -> None:
    env = ensure_env(EngineRecipe(vllm="9.27.1", accelerator="cuda"), tmp_path / "env.log")
    assert env.fingerprint["torch"] == "torch 9.13.0 (staged)"
    ov = env.fingerprint["torch_overlay"]
    assert ov["path"] == str(host / "_torch-9.13.0") and ov["packages"]["nvidia-nccl-cu13"] == "9.29.7"
    assert ov["check"] == "torch 9.13.0 from the overlay"
    # The engine gets the overlay first, ahead of what the cell put there (the GPU gate);
    # the overlay's variables only where the cell did not set them.
    engine_env = with_overlay({"PYTHONPATH": "/gate", "PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK": "0"}, env.fingerprint)
    assert engine_env["PYTHONPATH"] == f"{host / '_torch-9.13.0'}{os.pathsep}/gate"
    assert engine_env["PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK"] == "0"
    assert with_overlay({}, env.fingerprint)["PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK"] == "1"
    out = tmp_path / "engine.txt"
    proc = EngineProcess(argv=[str(env.python), "-c", f"import fake_engine; open({str(out)!r}, 'w').write(fake_engine.WHERE)"],
                         env=with_overlay({}, env.fingerprint), log_path=tmp_path / "engine.log", port=0)
    proc.start()
    assert proc.proc is not None and proc.proc.wait(60) == 0, (tmp_path / "engine.log").read_text()
    proc.stop()
    assert out.read_text().startswith(str(host / "_torch-9.13.0" / "torch"))
    # The environment alone (the orchestrator's side, a build step) does not see it.
    probe = "import importlib.util as u; s = u.find_spec('torch'); print(s and s.origin)"
    plain = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True, check=False,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert "_torch-9.13.0" not in plain.stdout


def test_without_the_overlay_the_env_build_says_what_is_missing(host: Path, tmp_path: Path) -> None:
    import shutil

    shutil.rmtree(host / "_torch-9.13.0")
    with pytest.raises(EnvBuildError, match=r"vllm 9.27.1 pins torch==9.13.0; the host has torch 2.11.0\+cu130 and "
                                            r".*_torch-9.13.0 holds no staged torch overlay"):
        ensure_env(EngineRecipe(vllm="9.27.1", accelerator="cuda"), tmp_path / "env.log")


def test_an_overlay_still_arriving_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wh = tmp_path / "wh"
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VMATRIX_WHEELHOUSE", str(wh))
    monkeypatch.setattr(venvs, "host_torch", lambda: "2.11.0+cu130")
    _staged_release(wh, "9.13.0")
    overlay.build(tmp_path / "src" / "_torch-9.13.0", _overlay_wheels(tmp_path / "wheels"))
    ups = volumes.pack([tmp_path / "src" / "_torch-9.13.0"], tmp_path / "up", 2_000, jobs=1, preset=1, lane_bytes=2_000)
    # The manifest's volume is not the last one: put it in first, as a call might.
    first = next(u for u in ups if any("vmatrix-overlay.json" in p.rel for p in volumes._pieces(next(u.glob("*.vol")).read_bytes())[0]))
    volumes.apply([first], wh)
    assert (wh / "_torch-9.13.0" / overlay.MANIFEST).is_file()
    with pytest.raises(EnvBuildError, match=r"_torch-9.13.0 is still arriving: \d+ volume\(s\) missing"):
        ensure_env(EngineRecipe(vllm="9.27.1", accelerator="cuda"), tmp_path / "env.log")


def test_an_overlay_that_fails_its_check_is_refused_with_the_checks_line(host: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overlay, "_PROBE", REAL_PROBE)  # the real probe: no GPU here
    with pytest.raises(EnvBuildError, match="failed its check on this host: .*torch 9.13.0: no CUDA device"):
        ensure_env(EngineRecipe(vllm="9.27.1", accelerator="cuda"), tmp_path / "env.log")


def test_a_release_on_the_hosts_own_torch_needs_no_overlay(host: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(venvs, "host_torch", lambda: "9.13.0+cu130")
    env = ensure_env(EngineRecipe(vllm="9.27.1", accelerator="cuda"), tmp_path / "env.log")
    assert "torch" not in env.fingerprint and "torch_overlay" not in env.fingerprint
    assert with_overlay({"A": "1"}, env.fingerprint) == {"A": "1"}


def test_the_hosts_feed_applies_uploads_and_checks_a_complete_overlay_in_the_background(tmp_path: Path) -> None:
    """images/offline-host.sh feed: the volumes go in at once, and the overlay's check runs
    behind the call once its last volume is in (here it fails: this machine has no GPU)."""
    import time

    overlay.build(tmp_path / "src" / "_torch-9.13.0", _overlay_wheels(tmp_path / "wheels"))
    ups = volumes.pack([tmp_path / "src" / "_torch-9.13.0"], tmp_path / "up", 2_000, jobs=1, preset=1, lane_bytes=2_000)
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "VMATRIX_WHEELHOUSE": str(tmp_path / "wh"), "VMATRIX_DATA": str(tmp_path / "data"),
           "VMATRIX_SITE": str(tmp_path / "site")}
    feed = [str(repo / "images" / "offline-host.sh"), "feed"]
    first = subprocess.run([*feed, *map(str, ups[:-1])], env=env, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert f"applied {len(ups) - 1}:" in first.stdout and "missing 1: _torch-9.13.0." in first.stdout
    last = subprocess.run([*feed, str(ups[-1])], env=env, capture_output=True, text=True, check=False)
    assert "complete: _torch-9.13.0; missing 0" in last.stdout
    failed = tmp_path / "wh" / "_torch-9.13.0" / overlay.FAILED
    deadline = time.monotonic() + 120
    while not failed.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "torch 9.13.0: no CUDA device" in failed.read_text()
    deadline = time.monotonic() + 30
    while "overlay FAILED" not in (tmp_path / "data" / "feed.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "overlay FAILED: " in (tmp_path / "data" / "feed.log").read_text()
