"""The canary report's requests answered by transformers (the builder's Nemotron-H, float32, CPU,
greedy, the whole prompt again each step), beside what the engine answered: is the engine's
recall the model's? (images/canary/README.md, "Why the engine's recall and the builder's report
differ"). Two steps, two pythons:

    # vmatrix's venv: a report DB's runs without MTP, their requests and the engine's answers
    python report_parity.py requests-from-db REPORT.db OUT.json
    # ... or the report's 1.5k workload (20 requests) at workload seeds 0..N-1, for a build
    python report_parity.py requests-at-seeds BUILD_FOLDER N OUT.json
    # an engine venv's python (torch, transformers 5.x): one entry of OUT.json
    PYTHON report_parity.py answers OUT.json ENTRY [COUNT]

``answers`` (images/canary/nemotronh_reference.py) prints one JSON line a request (transformers' answer, the engine's, whether each is
right and whether they agree) and a SUMMARY line. 2026-12-06, 1 thread: ~6 s a 1.5k request,
~9 minutes a 10k one.
"""

import json
import sys
import time
from pathlib import Path


def requests_from_db(db_path: str, out: str) -> None:
    import sqlite3

    from vmatrix.jobs.workload import build_workload
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    db = sqlite3.connect(db_path)
    entries = {}
    for run_id, workload, model in db.execute(
            "SELECT r.id, json_extract(c.spec, '$.workload'), json_extract(c.spec, '$.model.path') FROM runs r "
            "JOIN cells c ON c.id = r.cell_id WHERE json_extract(c.spec, '$.knobs.speculative') IS NULL"):
        spec = WorkloadSpec.model_validate_json(workload)
        engine = {k: t for k, t in db.execute("SELECT key, text FROM requests WHERE run_id = ?", (run_id,))}
        entries[str(run_id)] = {"model": model, "workload": spec.name, "requests": [
            {"key": r.key, "messages": [list(m) for m in r.messages], "expected": r.expect.to_json()["exact"],
             "engine": engine[r.key]} for _, phase in build_workload(spec).phases for r in phase]}
    Path(out).write_text(json.dumps(entries))
    print({k: (v["model"], v["workload"], len(v["requests"])) for k, v in entries.items()})


def requests_at_seeds(folder: str, seeds: int, out: str) -> None:
    from vmatrix.jobs.workload import build_workload
    from vmatrix.orchestrator.spec.workload import WorkloadSpec

    entries = {}
    for seed in range(seeds):
        spec = WorkloadSpec.model_validate({"name": "recall-1500", "prefix_tokens": 1500, "sessions": 6, "turns": 3,
                                            "agent_switches": 2, "max_tokens": 16, "seed": seed})
        entries[f"seed-{seed}"] = {"model": folder, "workload": f"recall-1500 seed {seed}", "requests": [
            {"key": r.key, "messages": [list(m) for m in r.messages], "expected": r.expect.to_json()["exact"],
             "engine": None} for _, phase in build_workload(spec).phases for r in phase]}
    Path(out).write_text(json.dumps(entries))
    print(list(entries))


def answers(requests_json: str, entry: str, count: int | None) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "canary"))
    import nemotronh_reference as ref

    torch.set_num_threads(1)
    data = json.loads(Path(requests_json).read_text())[entry]
    tok, model = ref.load_build(Path(data["model"]))
    rows, start = [], time.time()
    for r in data["requests"][:count]:
        ids = ref.prompt_ids(tok, r["messages"])
        want = tok(r["expected"], add_special_tokens=False)["input_ids"]
        out, margins = ref.greedy(model, ids, len(want) + 1)
        text = tok.decode(out, skip_special_tokens=True)
        row = {"key": r["key"], "prompt_tokens": len(ids), "transformers": text, "right": out[:len(want)] == want,
               "min_margin": min(margins)}
        if r["engine"] is not None:  # the engine answers past its end token; compare up to transformers' end
            engine_ids = tok(r["engine"], add_special_tokens=False)["input_ids"]
            row |= {"engine": r["engine"], "engine_right": engine_ids[:len(want)] == want,
                    "agree": r["engine"].startswith(text)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"entry": entry, "model": data["model"], "workload": data["workload"], "requests": len(rows),
               "transformers_right": sum(r["right"] for r in rows), "s": round(time.time() - start)}
    if rows and "engine" in rows[0]:
        summary |= {"engine_right": sum(r["engine_right"] for r in rows), "agree": sum(r["agree"] for r in rows)}
    print("SUMMARY", json.dumps(summary), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "requests-from-db":
        requests_from_db(sys.argv[2], sys.argv[3])
    elif mode == "requests-at-seeds":
        requests_at_seeds(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif mode == "answers":
        answers(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None)
    else:
        raise SystemExit(f"report_parity.py: no mode {mode!r} (requests-from-db, requests-at-seeds, answers)")
