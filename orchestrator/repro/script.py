"""The body of the file `vmatrix repro CELL -o repro.py` writes (standard library only).

`vmatrix repro` puts the recorded cell's values between the RECORDED markers below and a
README-style header above them; everything else is this file as it is. Kept a module of its
own so it can be run, linted and tested like any other: it must import nothing but the
standard library (tests/test_repro.py walks its imports), because its reader has vLLM and
nothing of vmatrix.

What it does, in order: start the control's engine and replay every phase (the requests of a
phase sent at once, as the recorded run sent them), stop it; then the cell's engine, `--runs`
times, each a fresh engine and the same replay; compare each answer with the control's token
by token (up to and including the control's first end-of-turn token, as vmatrix grades), print
each difference, and exit 1 when at least `--k` of the runs differ at a clear margin.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# BEGIN RECORDED (vmatrix repro replaces this block with the cell's values)
RELEASE = "vllm 0.0.0"
MODEL = ""
SERVED_NAME = "canary"
CELL_FLAGS: list[str] = []
CONTROL_FLAGS: list[str] = []
ENGINE_ENV: dict[str, str] = {}
API = "chat"
SAMPLING: dict = {"max_tokens": 1, "temperature": 0, "seed": 0, "ignore_eos": True,
                  "return_tokens_as_token_ids": True}
TOP_LOGPROBS = 2
TIE_MARGIN = 0.04
PHASES: list[dict] = []
# END RECORDED

EXIT_REPRODUCED = 1
EXIT_NOT_TESTED = 125  # the engine did not start or a request failed: no answer either way (git bisect run's skip)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine:
    """One `vllm serve` process on 127.0.0.1, its output in a log file; stopped with its process group."""

    def __init__(self, argv: list[str], log_path: Path, port: int) -> None:
        self.argv, self.log_path, self.port = argv, log_path, port
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> bool:
        env = dict(os.environ) | ENGINE_ENV
        log(f"$ {' '.join(shlex.quote(a) for a in self.argv)}  (log: {self.log_path})")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log(f"the engine exited ({self.proc.returncode}) before serving; its log's end:\n{self.tail()}")
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return True
            except OSError:
                pass
            time.sleep(1)
        log(f"the engine did not serve within {timeout_s:.0f} s")
        return False

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def connect(port: int, timeout_s: float) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    conn.connect()
    return conn


def post(conn: http.client.HTTPConnection, path: str, body: dict) -> None:
    conn.request("POST", path, json.dumps(body, ensure_ascii=False).encode(), {"content-type": "application/json"})


def token_id(token: str) -> int:
    # return_tokens_as_token_ids: the server names each token "token_id:123"
    return int(token.rsplit(":", 1)[1]) if token.startswith("token_id:") else -1


def prepare(port: int, request: dict, timeout_s: float) -> tuple[str, dict, dict]:
    """The path and body of one request as the recorded replay sent it, and its record."""
    out: dict = {"key": request["key"], "tokens": [], "margins": [], "text": "", "error": None}
    body = {"model": SERVED_NAME, **SAMPLING, "stream": True, "stream_options": {"include_usage": True}}
    if API == "chat":
        return "/v1/chat/completions", body | {"messages": request["messages"], "logprobs": True,
                                               "top_logprobs": TOP_LOGPROBS}, out
    # What the replay does for the completions API: the engine's own chat template renders
    # the messages (/tokenize), the ids go to /v1/completions.
    try:
        conn = connect(port, timeout_s)
        post(conn, "/tokenize", {"model": SERVED_NAME, "messages": request["messages"], "add_generation_prompt": True})
        resp = conn.getresponse()
        answer = resp.read()
        conn.close()
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"tokenize: {type(exc).__name__}: {exc}"
        return "", {}, out
    if resp.status != 200:
        out["error"] = f"tokenize: HTTP {resp.status}: {answer[:300]!r}"
        return "", {}, out
    return "/v1/completions", body | {"prompt": json.loads(answer)["tokens"], "logprobs": TOP_LOGPROBS}, out


def scheduler(port: int, path: str, timeout_s: float) -> str | None:
    """POST /pause?... or /resume (vLLM's scheduler pause, served with VLLM_SERVER_DEV_MODE=1);
    None when done, else why not."""
    try:
        conn = connect(port, timeout_s)
        conn.request("POST", path)
        resp = conn.getresponse()
        detail = resp.read()[:200]
        conn.close()
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if resp.status == 200 else f"HTTP {resp.status}: {detail!r}"


def receive(conn: http.client.HTTPConnection, out: dict, resp: http.client.HTTPResponse | None = None) -> dict:
    """One streamed answer: its token ids and the top-1 minus top-2 logprob at each (the
    margin a difference is judged at). ``resp``: its headers already read (a gated phase)."""
    try:
        resp = resp or conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return out
        text = []
        for raw in resp:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("error"):
                out["error"] = json.dumps(chunk["error"])[:300]
                break
            if usage := chunk.get("usage"):
                details = usage.get("prompt_tokens_details") or {}
                out["cached_tokens"] = details.get("cached_tokens")
            for choice in chunk.get("choices", ()):
                lp = choice.get("logprobs") or {}
                if "content" in lp:
                    items = [(i["token"], sorted((t["logprob"] for t in i.get("top_logprobs") or ()), reverse=True))
                             for i in lp.get("content") or ()]
                else:
                    tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or ())
                    items = [(tok, sorted((top or {}).values(), reverse=True))
                             for tok, top in zip(lp.get("tokens") or (), tops)]
                for tok, top in items:
                    out["tokens"].append(token_id(tok))
                    out["margins"].append(top[0] - top[1] if len(top) > 1 else None)
                piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
                text.append(piece or "")
        out["text"] = "".join(text)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return out


def replay(port: int, timeout_s: float) -> dict[str, dict]:
    """Every phase in order. A phase's requests go out at once and in their recorded order,
    as the replay sends them (it starts each request in turn without waiting for any answer):
    each is written to its own connection, one after the other, before any answer is read;
    then one thread per request reads its stream. The order matters: which prompt's prefill
    chunk ends where depends on the order the engine receives them.

    A gated phase (vmatrix's ``gate: true``) is sent as the replay sends it: the engine's
    scheduler paused (mode keep), each request written once the previous one's headers came
    back (the server has then handed it to the engine), 0.2 s, resumed: the scheduler meets
    them all at once and in order, so the race lays its chunks out the same every run."""
    answers: dict[str, dict] = {}
    for phase in PHASES:
        requests = phase["requests"]
        gated = bool(phase.get("gated"))
        prepared = [prepare(port, r, timeout_s) for r in requests]
        sent: list[tuple[http.client.HTTPConnection | None, dict, http.client.HTTPResponse | None]] = []
        conns = []
        for path, _, out in prepared:
            conns.append(connect(port, timeout_s) if path and not out["error"] else None)
        if gated and (why := scheduler(port, "/pause?mode=keep&clear_cache=false", timeout_s)):
            # Not tested, like a failed request: the phase cannot be sent as it was recorded.
            for conn, (_, _, out) in zip(conns, prepared):
                out["error"] = f"gate: the engine did not pause its scheduler ({why}); needs VLLM_SERVER_DEV_MODE=1"
                answers[out["key"]] = out
                if conn is not None:
                    conn.close()
            break
        try:
            for conn, (path, body, out) in zip(conns, prepared):
                resp = None
                if conn is not None:
                    try:
                        post(conn, path, body)
                        resp = conn.getresponse() if gated else None
                    except (OSError, http.client.HTTPException) as exc:
                        out["error"], conn = f"{type(exc).__name__}: {exc}", None
                sent.append((conn, out, resp))
            if gated:
                time.sleep(0.2)
        finally:
            if gated and (why := scheduler(port, "/resume", timeout_s)):
                log(f"  phase {phase['name']}: the engine did not resume its scheduler ({why}); "
                    "its answers wait for the request timeout")
        results: list[dict] = [out for _, out, _ in sent]
        threads = [threading.Thread(target=receive, args=(conn, out, resp))
                   for conn, out, resp in sent if conn is not None]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        hits = sum(1 for r in results if r.get("cached_tokens"))
        how = "held, then released together" if gated else "at once"
        log(f"  phase {phase['name']}: {len(requests)} request(s) {how}, {hits} with a prefix-cache hit")
        for r in results:
            answers[r["key"]] = r
        if any(r["error"] for r in results):
            break
    return answers


def answer_span(tokens: list[int], end_tokens: set[int]) -> int | None:
    """Up to and including the first end-of-turn token (what vmatrix grades); None: all."""
    return next((i + 1 for i, t in enumerate(tokens) if t in end_tokens), None)


def compare(cell: dict[str, dict], control: dict[str, dict], end_tokens: set[int]) -> list[dict]:
    """Each request whose answer differs from the control's: where, at what control margin,
    and whether that margin is clear of a tie (a near-tie flip is not counted as wrong)."""
    found = []
    for phase in PHASES:
        for request in phase["requests"]:
            key = request["key"]
            ref, got = control.get(key), cell.get(key)
            if ref is None or ref["error"]:
                continue
            span = answer_span(ref["tokens"], end_tokens)
            want, have = ref["tokens"][:span], (got or {}).get("tokens", [])[:span]
            if got is None or got["error"]:
                found.append({"key": key, "index": None, "clear": True, "why": (got or {}).get("error", "not sent")})
                continue
            index = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), None)
            if index is None and len(have) != len(want):
                index = min(len(have), len(want))
            if index is None:
                continue
            margin = ref["margins"][index] if index < len(ref["margins"]) else None
            clear = margin is None or margin > TIE_MARGIN or index >= len(have)
            found.append({"key": key, "index": index, "margin": margin, "clear": clear,
                          "cell": have[index:index + 8], "control": want[index:index + 8],
                          "cell_text": got["text"], "control_text": ref["text"]})
    return found


def end_tokens_of(model: str) -> set[int]:
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((Path(model) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        ids = {i for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int)}
        if ids:
            return ids
    return set()


def engine_argv(args: argparse.Namespace, flags: list[str], port: int) -> list[str]:
    if args.vllm:
        command = shlex.split(args.vllm)
        # `vllm serve MODEL` takes the model as its argument; an api_server module takes --model.
        head = command + ([args.model] if command[-1] == "serve" else ["--model", args.model])
    else:
        head = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model]
    return head + ["--port", str(port), *flags]


def run_once(args: argparse.Namespace, flags: list[str], label: str, logs: Path) -> dict[str, dict] | None:
    port = args.port or free_port()
    engine = Engine(engine_argv(args, flags, port), logs / f"{label}.log", port)
    try:
        if not engine.start(args.startup_timeout):
            return None
        t = time.monotonic()
        answers = replay(port, args.timeout)
        log(f"  {label}: {len(answers)} answers in {time.monotonic() - t:.0f} s")
        failed = [a for a in answers.values() if a["error"]]
        if failed:
            log(f"  {label}: {len(failed)} request(s) failed, first {failed[0]['key']}: {failed[0]['error']}\n"
                f"{engine.tail()}")
            return None
        return answers
    finally:
        engine.stop()


def _exit_on_signal(signum: int, frame: object) -> None:
    # The engine runs in its own session (so that its workers go with it): a SIGTERM or
    # SIGHUP that killed this process outright would leave it serving. Raised as an exit,
    # run_once's `finally` stops it first.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", default=MODEL, help="the model folder (default: %(default)s)")
    parser.add_argument("--vllm-python", "--python", default=sys.executable,
                        help="python of the venv holding vLLM (default: this one)")
    parser.add_argument("--vllm", help="command that starts the server instead, e.g. 'vllm serve'")
    parser.add_argument("--port", type=int, default=0, help="port for the engine (default: a free one)")
    parser.add_argument("--runs", type=int, default=3, help="engine runs of the cell (default: %(default)s)")
    parser.add_argument("--k", type=int, default=1,
                        help="exit 1 when at least K of the runs differ at a clear margin (default: %(default)s)")
    parser.add_argument("--startup-timeout", type=float, default=900, help="seconds (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request (default: %(default)s)")
    parser.add_argument("--logs", type=Path, help="folder for the engines' logs (default: a temporary one)")
    args = parser.parse_args(argv)
    if not args.model or not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model!r}: not a model folder (no config.json)")
    if not 1 <= args.k <= args.runs:
        parser.error(f"--k {args.k}: between 1 and --runs ({args.runs})")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="repro-"))
    logs.mkdir(parents=True, exist_ok=True)
    end_tokens = end_tokens_of(args.model)
    total = sum(len(p["requests"]) for p in PHASES)
    log(f"{RELEASE}: {total} requests in {len(PHASES)} phase(s); control first, then the cell {args.runs} time(s)")
    control = run_once(args, CONTROL_FLAGS, "control", logs)
    if control is None:
        return EXIT_NOT_TESTED
    wrong_runs = 0
    for n in range(1, args.runs + 1):
        cell = run_once(args, CELL_FLAGS, f"cell-{n}", logs)
        if cell is None:
            return EXIT_NOT_TESTED
        found = compare(cell, control, end_tokens)
        clear = [f for f in found if f["clear"]]
        wrong_runs += bool(clear)
        print(f"run {n}: {len(clear)} of {total} answers differ from the control at a clear margin"
              f" ({len(found) - len(clear)} more at a near-tie)")
        for f in found:
            if f["index"] is None:
                print(f"  {f['key']}: no answer ({f['why']})")
                continue
            margin = "-" if f["margin"] is None else f"{f['margin']:.2f}"
            kind = "DIFFERS" if f["clear"] else "near-tie flip"
            print(f"  {f['key']}: {kind} at token {f['index']} (control margin {margin}): "
                  f"cell {f['cell']} vs control {f['control']}")
            print(f"    cell:    {f['cell_text']!r}\n    control: {f['control_text']!r}")
        if wrong_runs >= args.k:
            print(f"REPRODUCED: {wrong_runs} of {n} run(s) differ (k={args.k})")
            return EXIT_REPRODUCED
        if wrong_runs + (args.runs - n) < args.k:
            break  # k cannot be reached any more
    print(f"not reproduced: {wrong_runs} of {n} run(s) differ, fewer than k={args.k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
