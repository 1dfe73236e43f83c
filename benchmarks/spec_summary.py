"""One markdown row per run of the results DB: engine, knobs, outcome, acceptance per
position, decode tokens/s (median over requests, db.samples.decode_tps)."""
import json
import sqlite3
import statistics
import sys
from pathlib import Path

from vmatrix.db.copies import unpacked
from vmatrix.db.reads import is_archive
from vmatrix.db.samples import decode_tps
from vmatrix.orchestrator.paths import cache_dir

source = Path(sys.argv[1])
# A NAME.db.xz (docs/runs keeps its largest DBs so) is read from its unpacked copy, as `--db` reads it.
db = sqlite3.connect(unpacked(source, cache_dir() / "dbs") if is_archive(source) else source)
grade = {r[0]: r[1] for r in db.execute("select run_id, verdict from grades order by id")}
rows = []
for rid, cell, status, sig, msg, timings in db.execute("select id, cell_id, status, signature, message, timings from runs order by id"):
    label, knobs, ctl = db.execute("select engine_label, knobs, control_id from cells where id=?", (cell,)).fetchone()
    k = json.loads(knobs)
    spec = k.get("speculative")
    sp = "off" if not spec else f"{spec['method']} k={spec['num_speculative_tokens']}" + (f" {spec['model'].removeprefix('canary:')}" if spec.get("model") else "")
    m = {}
    for name, value in db.execute("select name, value from metrics where run_id=?", (rid,)):
        m[name] = m.get(name, 0.0) + value
    drafts = m.get("vllm:spec_decode_num_drafts_total", 0)
    pos = sorted((n, v) for n, v in m.items() if "accepted_tokens_per_pos" in n)
    acc = " / ".join(f"{v / drafts:.0%}" for _, v in pos) if drafts else "-"
    dt = m.get("vllm:spec_decode_num_draft_tokens_total", 0)
    tot = f"{m.get('vllm:spec_decode_num_accepted_tokens_total', 0) / dt:.0%} of {dt:.0f}" if dt else "-"
    tps = []
    fails = 0
    for toks, ttft, e2e, err in db.execute("select token_ids, ttft_s, e2e_s, error from requests where run_id=?", (rid,)):
        if err:
            fails += 1
        v = decode_tps(len(json.loads(toks)), ttft, e2e)
        if v is not None:
            tps.append(v)
    t = json.loads(timings)
    print(f"| {label} | {'on' if k['prefix_caching'] else 'off'} | {sp} | {status} | {grade.get(rid, '-')} | "
          f"{(sig or msg or '')[:150]} | {acc} | {tot} | {statistics.median(tps):.1f}" if tps else
          f"| {label} | {'on' if k['prefix_caching'] else 'off'} | {sp} | {status} | {grade.get(rid, '-')} | "
          f"{(sig or msg or '')[:150]} | {acc} | {tot} | -", f"| {t.get('startup_s', 0):.0f} s | {cell[:8]} | fails {fails}")
