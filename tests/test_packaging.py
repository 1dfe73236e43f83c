"""The project as a non-editable install ships what its editable checkout has: the
orchestrator's image (images/Dockerfile.orchestrator) installs the wheel, and a patch
set missing there is a sweep that cannot start (a CI run found the per-release
cpu-mamba-align folders and the dflash2-0.26.0 set left out)."""

from __future__ import annotations

import os
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


def test_a_checkout_on_pythonpath_imports_its_layers_by_the_one_name(tmp_path: Path) -> None:
    # images/offline-host.sh and benchmarks/*.sh run `python -m vmatrix.orchestrator.cli`
    # with the checkout on PYTHONPATH, not installed: no setup.py mapping exists there. -S
    # keeps site's .pth files (an editable install's finder) out; the dependencies come in
    # through PYTHONPATH, as the offline host's VMATRIX_SITE does.
    import site

    code = ("import sys, vmatrix.db.store, vmatrix.orchestrator.cli.app, vmatrix.images.canary; "
            "print(sys.modules['vmatrix.orchestrator.cli.app'].__file__); print(sys.modules['vmatrix.images.canary'].__file__)")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(ROOT), *site.getsitepackages()])}
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(ROOT / "orchestrator" / "cli" / "app.py"),
                                   str(ROOT / "images" / "canary" / "__init__.py")]
