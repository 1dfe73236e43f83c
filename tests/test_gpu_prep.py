"""benchmarks/gpu_nemotronh_prep.sh, a lease's first call for the Nemotron-H canary: it unpacks
n1c-final.tar (the model the Mamba2 matrices serve, and a bfloat16 copy of it) and each build tar
a pass starts from, where the plan's ``--init-from`` and canary_gpu.py's resume look. Run with
PREP_TRAIN=0, so no trainer starts, on tars made here in the layout the builder writes (a
folder ``canary-NAME/``); the script's own bash, tar and python3."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREP = ROOT / "benchmarks" / "gpu_nemotronh_prep.sh"


def _build_tar(tmp: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp / "src" / f"canary-{name}"
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(text)
    tar = tmp / f"{name}.tar"
    with tarfile.open(tar, "w") as out:
        out.add(folder, arcname=folder.name)
    return tar


def _prep(tmp: Path, *tars: Path) -> Path:
    nemo, resume = tmp / "nemo", tmp / "resume"
    resume.mkdir(exist_ok=True)
    env = {**os.environ, "NEMO_DIR": str(nemo), "RESUME_DIR": str(resume), "PREP_TRAIN": "0"}
    subprocess.run(["bash", str(PREP), str(tars[0]), str(tmp / "plan.txt"), *map(str, tars[1:])],
                   env=env, check=True, capture_output=True, text=True, timeout=60)
    return nemo


def test_prep_unpacks_n1c_a_bfloat16_copy_and_each_build_under_its_name(tmp_path: Path) -> None:
    (tmp_path / "plan.txt").write_text("")
    n1c = _build_tar(tmp_path, "n1c", {"config.json": json.dumps({"torch_dtype": "float32"}),
                                       "model.safetensors": "weights"})
    # Many files, so tar is still listing when the first line is read: under pipefail a reader
    # that closes the pipe early (head -n 1) killed tar with SIGPIPE on the host (05fa63d).
    build = _build_tar(tmp_path, "h16-s1-n9", {f"f{i:04d}": "x" * 2000 for i in range(400)})
    nemo = _prep(tmp_path, n1c, build)
    assert json.loads((nemo / "n1c" / "config.json").read_text())["torch_dtype"] == "float32"
    assert json.loads((nemo / "n1c-bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (nemo / "n1c-bf16" / "model.safetensors").read_text() == "weights"
    assert len(list((nemo / "h16-s1-n9").iterdir())) == 400
    assert not (nemo / "canary-h16-s1-n9").exists() and not (nemo / "canary-n1c").exists()
    assert not list((tmp_path / "resume").iterdir())  # no resume.pt: nothing to resume


def test_a_stopped_build_is_also_unpacked_where_the_trainer_resumes_it(tmp_path: Path) -> None:
    (tmp_path / "plan.txt").write_text("")
    n1c = _build_tar(tmp_path, "n1c", {"config.json": "{}"})
    stopped = _build_tar(tmp_path, "h16-s1", {"resume.pt": "state", "config.json": "{}"})
    nemo = _prep(tmp_path, n1c, stopped)
    assert (nemo / "h16-s1" / "resume.pt").read_text() == "state"
    assert (tmp_path / "resume" / "canary-h16-s1" / "resume.pt").read_text() == "state"
