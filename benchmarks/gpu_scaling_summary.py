"""Summarise benchmarks/gpu_scaling.sh: wall time per measurement, per-cell times, and
scaling efficiency = T(1 GPU) / (2 x T(2 GPUs)) for each binding setting.

    python benchmarks/gpu_scaling_summary.py RESULTS_DB SCALING_TXT

Two walls per measurement: the command's (driver start and Ray connection included:
what a user waits for) and the cells' span (first cell start to last cell end).
"""

from __future__ import annotations

import json
import sqlite3
import sys


def main(db_path: str, scaling_txt: str) -> None:
    db = sqlite3.connect(db_path)
    rows = []
    with open(scaling_txt) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        parts = line.split()
        if len(parts) != 6:
            continue
        label, gpus, pin, t0, t1, rc = parts
        runs = db.execute("select id, gpu_ids, started_at, finished_at, timings, status from runs "
                          "where started_at >= ? and finished_at <= ? order by started_at", (float(t0), float(t1))).fetchall()
        span = max(r[3] for r in runs) - min(r[2] for r in runs) if runs else float("nan")
        cells = "; ".join(
            f"run {r[0]} gpu {','.join(json.loads(r[1]))} {r[5]} start {json.loads(r[4]).get('startup_s', 0):.1f} s "
            f"total {json.loads(r[4]).get('total_s', 0):.1f} s" for r in runs)
        rows.append((label, int(gpus), pin == "1", float(t1) - float(t0), span, rc, cells))
    print("| measurement | GPUs | bound | command wall | cells' span | cells |")
    print("|---|---|---|---|---|---|")
    for label, gpus, pin, wall, span, rc, cells in rows:
        print(f"| {label}{'' if rc == '0' else f' (rc {rc})'} | {gpus} | {'yes' if pin else 'no'} | {wall:.1f} s | {span:.1f} s | {cells} |")
    print()
    for pin in (False, True):
        for suffix in ("", "b"):
            two = [r for r in rows if r[0] == f"{'bound' if pin else 'unbound'}-2{suffix}"]
            one = [r for r in rows if r[0] == f"{'bound' if pin else 'unbound'}-1"]
            if two and one:
                print(f"{'bound' if pin else 'unbound'}-2{suffix} vs -1: efficiency {one[0][3] / (2 * two[0][3]):.0%} "
                      f"(command walls), {one[0][4] / (2 * two[0][4]):.0%} (cells' spans)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
