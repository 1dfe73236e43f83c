"""Summarise benchmarks/gpu_packing.sh: the same cells serial, at 0.5 and at 0.25 of a GPU.

    python benchmarks/gpu_packing_summary.py RESULTS_DB PACKING_TXT

Prints markdown: per cell and step, the engine's start (and the wait for the GPU's gate,
runtimes/gpu_share.py), the replay and the verdict; per step, the command's wall time,
the cells' span, the longest cell, the wall over the longest cell (the issue's goal: at
most 1.5 packed), peak GPU memory used (nvidia-smi, sampled by the driver), where the
gate was held (in the engine, images/gpu_gate, or around the whole start: the runs'
fingerprints), and whether the verdicts and the generated tokens equal the serial
step's. A control that runs twice a step (``grading: calibrate: true``) is two rows, the
second "(repeat)", each compared with its own in the serial step. Where the engine logs
are readable (on the host), where each start's time went, from vLLM's own timestamped
lines, with the engine's wait at the gate, its time inside it, and the KV cache memory
vLLM found: for one cell at one fraction independent of the GPU's other engines if the
gate keeps their profiling apart (a calibrated control's two runs in one step agree).
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from statistics import mean


@dataclass
class Step:
    label: str
    fraction: float
    t0: float
    t1: float
    rc: str
    runs: dict[str, dict] = field(default_factory=dict)  # cell id -> run

    @property
    def wall(self) -> float:
        return self.t1 - self.t0


def cell_name(db: sqlite3.Connection, cell_id: str) -> str:
    patches, knobs = db.execute("select patches, knobs from cells where id = ?", (cell_id,)).fetchone()
    knobs = json.loads(knobs)
    parts = [f"+{patches}"] if patches else []
    if knobs.get("prefix_caching"):
        parts.append("prefix caching")
    if spec := knobs.get("speculative"):
        parts.append(f"{spec['method'].upper()} k={spec['num_speculative_tokens']}")
    if knobs.get("async_scheduling") is False:
        parts.append("async scheduling off")
    return ", ".join(parts) or "control"


REPEAT = "#2"  # the key of a cell's second run in one step (a calibrated control)


def load_steps(db: sqlite3.Connection, packing_txt: Path) -> list[Step]:
    steps = []
    for line in packing_txt.read_text().splitlines():
        parts = line.split()
        if len(parts) != 5 or line.startswith("#"):
            continue
        step = Step(parts[0], float(parts[1]), float(parts[2]), float(parts[3]), parts[4])
        sweeps = [r[0] for r in db.execute("select id from sweeps where created_at between ? and ?", (step.t0, step.t1))]
        for run_id, cell_id, status, signature, timings, fingerprint, started, finished, log_path in db.execute(
            "select id, cell_id, status, signature, timings, fingerprint, started_at, finished_at, log_path from runs "
            f"where sweep_id in ({','.join('?' * len(sweeps))}) order by id", sweeps
        ):
            grade = db.execute("select verdict from grades where run_id = ? order by id desc limit 1", (run_id,)).fetchone()
            key = cell_id + REPEAT if cell_id in step.runs else cell_id
            step.runs[key] = {
                "id": run_id, "status": status, "signature": signature, "timings": json.loads(timings or "{}"),
                "gate": gate_kind(json.loads(fingerprint or "{}")),
                "started": started, "finished": finished, "log": log_path, "verdict": grade[0] if grade else status,
                "tokens": {k: json.loads(t or "[]") for k, t in db.execute(
                    "select key, token_ids from requests where run_id = ?", (run_id,))},
            }
        steps.append(step)
    return steps


def gate_kind(fingerprint: dict) -> str:
    """Where a run's engine passed its GPU's gate, from the run's fingerprint (run_cell)."""
    gate = fingerprint.get("gpu_gate")
    if gate is None:
        return "none (a whole GPU)"
    return "in the engine" if gate.startswith("in the engine") else "the whole start"


def gpu_memory(csv_path: Path) -> tuple[float | None, float | None, float | None]:
    """Peak memory used (MiB, summed over the GPUs at each sample), the GPUs' memory
    (MiB), mean utilization (%) over the samples."""
    if not csv_path.is_file():
        return None, None, None
    by_time: dict[str, float] = {}
    total: dict[str, float] = {}
    util = []
    for row in csv.reader(csv_path.open()):
        if len(row) < 5:
            continue
        try:
            stamp, index, used, size, busy = (r.strip() for r in row[:5])
            by_time[stamp] = by_time.get(stamp, 0.0) + float(used)
            total[index] = float(size)
            util.append(float(busy))
        except ValueError:
            continue
    if not by_time:
        return None, None, None
    return max(by_time.values()), sum(total.values()), mean(util)


_STAMP = re.compile(r"^\((\w+)(?:_\w+)? pid=\d+\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d)")
MARKS = (("Initializing a V1 LLM engine", "core"), ("Starting to load model", "load"),
         ("init engine (profile, create kv cache, warmup model) took", "kv"), ("Starting vLLM server on", "serve"))


def start_phases(log_path: str | None) -> dict[str, float] | None:
    """Seconds from the engine's first timestamped line to each of vLLM's start marks
    (the engine core, the model load just after the memory snapshot, the KV cache
    allocated, the API server up), for its last start in the log."""
    try:
        text = Path(log_path or "").read_text(errors="replace").rpartition("\n$ ")[2]
    except OSError:
        return None
    first, seen = None, {}
    for line in text.splitlines():
        if (m := _STAMP.match(line)) is None:
            continue
        at = datetime.strptime(m[2], "%m-%d %H:%M:%S")
        first = first or at
        for text_mark, name in MARKS:
            if text_mark in line and name not in seen:
                seen[name] = (at - first).total_seconds()
        if (took := re.search(r"warmup model\) took ([\d.]+) s", line)) is not None:
            seen["kv_took"] = float(took[1])
    # The engine's own gate lines (images/gpu_gate) and what its profiling left for the KV cache.
    for name, pattern in (("gate_wait", r"vmatrix-gpu-gate: took the GPU gate after ([\d.]+) s"),
                          ("gate_held", r"vmatrix-gpu-gate: gave the GPU gate back after ([\d.]+) s"),
                          ("kv_gib", r"Available KV cache memory: (-?[\d.]+) GiB")):
        if found := re.findall(pattern, text):
            seen[name] = float(found[-1])
    return seen or None


def main(db_path: str, packing_txt: str) -> None:
    db = sqlite3.connect(db_path)
    steps = [s for s in load_steps(db, Path(packing_txt)) if s.label != "warmup"]
    if not steps:
        sys.exit(f"{packing_txt}: no measured steps")
    serial = next((s for s in steps if s.fraction >= 1), steps[0])
    cells = list(dict.fromkeys(list(serial.runs) + [c for s in steps for c in s.runs]))
    names = {c: cell_name(db, c.removesuffix(REPEAT)) + (" (repeat)" if c.endswith(REPEAT) else "") for c in cells}

    def head(title: str) -> None:
        print(f"| {title} | " + " | ".join(f"{s.label} ({s.fraction:g} GPU)" for s in steps) + " |")
        print("|---|" + "---|" * len(steps))

    print("Per cell: engine start (+ wait at the GPU's gate) / replay / verdict\n")
    head("cell")
    for c in cells:
        row = []
        for s in steps:
            r = s.runs.get(c)
            if r is None:
                row.append("-")
                continue
            t = r["timings"]
            gate = f" (+{t['gpu_gate_wait_s']:.0f} s)" if t.get("gpu_gate_wait_s", 0) >= 0.5 else ""
            row.append(f"{t.get('startup_s', 0):.0f} s{gate} / {t.get('replay_s', 0):.0f} s / **{r['verdict']}**")
        print(f"| {names[c]} | " + " | ".join(row) + " |")

    print("\nPer step\n")
    head("")
    rows: dict[str, list[str]] = {k: [] for k in (
        "command wall", "cells' span", "longest cell", "wall / longest cell", "peak GPU memory used",
        "mean GPU utilization", "GPU gate held", "verdicts equal to serial", "tokens identical to serial")}
    for s in steps:
        runs = list(s.runs.values())
        span = max(r["finished"] for r in runs) - min(r["started"] for r in runs) if runs else float("nan")
        longest = max((r["timings"].get("total_s", 0) - r["timings"].get("gpu_gate_wait_s", 0)
                       - r["timings"].get("gpu_gate_stop_wait_s", 0) for r in runs), default=0)
        peak, size, util = gpu_memory(Path(packing_txt).parent / f"packing-mem-{s.label}.csv")
        same_verdicts = sum(1 for c, r in s.runs.items() if c in serial.runs and serial.runs[c]["verdict"] == r["verdict"])
        same, total = 0, 0
        for c, r in s.runs.items():
            base = serial.runs.get(c, {}).get("tokens", {})
            for key, tokens in base.items():
                total += 1
                same += r["tokens"].get(key) == tokens
        rows["command wall"].append(f"{s.wall:.0f} s" + ("" if s.rc == "0" else f" (rc {s.rc})"))
        rows["cells' span"].append(f"{span:.0f} s")
        rows["longest cell"].append(f"{longest:.0f} s")
        rows["wall / longest cell"].append(f"{s.wall / longest:.2f}" if longest else "-")
        rows["peak GPU memory used"].append(f"{peak / 1024:.1f} of {size / 1024:.0f} GiB" if peak else "not sampled")
        rows["mean GPU utilization"].append(f"{util:.0f}%" if util is not None else "not sampled")
        kinds = [r["gate"] for r in runs]
        rows["GPU gate held"].append(", ".join(f"{k} {kinds.count(k)}/{len(kinds)}" for k in dict.fromkeys(kinds)))
        rows["verdicts equal to serial"].append(f"{same_verdicts}/{len(s.runs)}")
        rows["tokens identical to serial"].append(f"{same}/{total} requests")
    for name, values in rows.items():
        print(f"| {name} | " + " | ".join(values) + " |")

    phases = {(s.label, c): start_phases(r["log"]) for s in steps for c, r in s.runs.items()}
    if any(phases.values()):
        print("\nWhere each start went (s from the engine's first log line: engine core up, model load, KV cache "
              "allocated [vLLM's own 'init engine took'], API server up; then, from the engine's own gate lines, "
              "its wait at the gate and its time inside it; and vLLM's 'Available KV cache memory')\n")
        head("cell")
        for c in cells:
            row = []
            for s in steps:
                p = phases.get((s.label, c)) or {}
                gate = (f"; gate: waited {p['gate_wait']:.1f}, held {p['gate_held']:.1f}"
                        if "gate_wait" in p and "gate_held" in p else "")
                row.append(" / ".join(f"{p[k]:.0f}" if k in p else "?" for k in ("core", "load", "kv", "serve"))
                           + (f" [{p['kv_took']:.1f}]" if "kv_took" in p else "") + gate
                           + (f"; KV {p['kv_gib']:.2f} GiB" if "kv_gib" in p else ""))
            print(f"| {names[c]} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
