"""The project as a non-editable install ships what its editable checkout has: the
orchestrator's image (images/Dockerfile.orchestrator) installs the wheel, and a patch
set missing there is a sweep that cannot start (a CI run found the per-release
cpu-mamba-align folders and the dflash2-0.26.0 set left out)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_patch_set_file(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ and egg-info into the tree it builds.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".gpu", "build", "*.egg-info", "__pycache__", ".venv*", "docs", "tests", "benchmarks"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                    str(source)], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    # One import name (setup.py): images/ ships as vmatrix/images/, and nothing else
    # lands at the top of site-packages beside vmatrix and its metadata.
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"vmatrix"}
    shipped = {n.removeprefix("vmatrix/") for n in names if n.startswith("vmatrix/images/patches/")}
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "images" / "patches").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
    assert tree, "no patch sets in the checkout"
    assert tree - shipped == set()
    assert any("/cpu-mamba-align/0.32.0/" in n for n in shipped)
