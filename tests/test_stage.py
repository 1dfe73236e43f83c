"""images/stage.py: what is staged for a release that pins a torch the host lacks (pip is
replaced by a function that hands out small wheels written here; the real staging of
0.27.1 and torch 2.13.0 is in docs/GPU.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_torch_overlay import _overlay_wheels, _wheel
from vmatrix.images import overlay, stage


def test_pins_are_read_from_requires_dist_and_extras_do_not_count(tmp_path: Path) -> None:
    w = _wheel(tmp_path, "torch", "9.13.0", {"torch/__init__.py": b""},
               requires=('triton==9.7.1; platform_system == "Linux"', "nvidia-nccl-cu13 (==9.29.7)",
                         "sympy>=1.13", "opt-einsum>=3.3 ; extra == 'opt-einsum'"))
    reqs = stage._requires(w)
    assert "opt-einsum>=3.3 ; extra == 'opt-einsum'" not in reqs
    assert stage._pin(reqs, "triton") == "9.7.1" and stage._pin(reqs, "nvidia-nccl-cu13") == "9.29.7"
    assert stage._pin(reqs, "sympy") is None
    assert stage.norm("Nvidia_NCCL.cu13") == "nvidia-nccl-cu13"
    assert {"torch", "nvidia-nccl-cu13", "triton", "ray"} - stage.host_packages() == {"ray"}


def test_the_torch_step_fetches_what_torch_pins_and_builds_the_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    wheels = _overlay_wheels(index)
    # The fake torch pins the fake triton and NCCL, as torch 2.13.0 pins 3.7.1 and 2.29.7.
    torch_wheel = _wheel(index, "torch", "9.13.0", {"torch/__init__.py": b"__version__ = '9.13.0'\n"},
                         requires=("triton==9.7.1", "nvidia-nccl-cu13==9.29.7", "filelock"))
    wanted: list[str] = []

    def pip(*args: str) -> None:  # pip download -d DIR NAME==V ...: copy the index's wheels
        dest = Path(args[args.index("-d") + 1])
        dest.mkdir(parents=True, exist_ok=True)
        for spec in (a for a in args if "==" in a):
            wanted.append(spec)
            name, version = spec.split("==")
            found = [w for w in [*wheels, torch_wheel] if w.name.startswith(f"{name.replace('-', '_')}-{version}-")]
            shutil.copy(found[-1], dest)

    monkeypatch.setattr(stage, "_pip", pip)
    folder = stage.torch("9.13.0", tmp_path / "st", torchvision=None)
    assert wanted == ["torch==9.13.0", "triton==9.7.1", "nvidia-nccl-cu13==9.29.7"]
    assert folder == tmp_path / "st" / "_torch-9.13.0"
    assert overlay.read(folder)["packages"] == {"torch": "9.13.0", "triton": "9.7.1", "nvidia-nccl-cu13": "9.29.7"}
    assert not (folder / "triton" / "backends" / "nvidia" / "bin" / "ptxas-blackwell").exists()
