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


def _builder(tmp: Path, plan: str, **env: str) -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "plan.txt").write_text(plan)
    n1c = _build_tar(tmp, "n1c", {"config.json": "{}"})
    run_env = {k: v for k, v in os.environ.items() if k != "BUILDER"}
    run_env.update(NEMO_DIR=str(tmp / "nemo"), RESUME_DIR=str(tmp), PREP_TRAIN="0", **env)
    return subprocess.run(["bash", str(PREP), str(n1c), str(tmp / "plan.txt")], env=run_env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_builder_is_the_plans_own_line_unless_builder_names_one(tmp_path: Path) -> None:
    named = "# a pass\n# builder: images/canary/build_nemotronh_lookup.py\nx --seed 1\n"
    assert "builder: images/canary/build_nemotronh_lookup.py" in _builder(tmp_path / "a", named).stdout
    assert "builder: images/canary/build_nemotronh.py" in _builder(tmp_path / "b", "x --seed 1\n").stdout
    chosen = _builder(tmp_path / "c", named, BUILDER="images/canary/build_nemotronh_groups.py")
    assert "builder: images/canary/build_nemotronh_groups.py" in chosen.stdout


def test_a_builder_that_is_not_there_stops_the_first_call_in_one_line(tmp_path: Path) -> None:
    proc = _builder(tmp_path, "# builder: images/canary/build_nemotronh_lokup.py\n")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gpu_nemotronh_prep.sh: builder images/canary/build_nemotronh_lokup.py: "
                                   "no such file")
