"""`vmatrix results show CELL` for a person: what the newest run of a cell says, in the
order someone deciding whether to run that stack reads it.

The verdict and its reason first; then the first place the cell went wrong, its
continuation next to the control's (and the expected answer where the workload has
one); then whether the run exercised what the cell claims to test; then speed; then the
engine log to open. Every run older than the newest is one line at the end: the whole
document, fingerprint included, is `--format json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vmatrix import speed
from vmatrix.db.counters import SPEC_DRAFTS, rates
from vmatrix.db.evidence import ground_truth, unmeasured_of
from vmatrix.db.queries import CellDetail, RunDetail
from vmatrix.db.reads import PREFIX_HITS, PREFIX_QUERIES
from vmatrix.db.records import ShrinkRecord
from vmatrix.records import FOLLOWS_CELLS

# partial: not clean's green; a verdict to read the reasons of (listed under it).
VERDICT_STYLE = {"clean": "green", "partial": "bold yellow3", "control": "cyan", "degraded": "yellow",
                 "corrupt": "bold red", "crashed": "bold red", "unexercised": "yellow",
                 "task_failed": "dim"}  # vmatrix's task died: not the stack's result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _headline(detail: CellDetail, run: RunDetail | None, counters: Mapping[str, float]) -> RenderableType:
    from vmatrix.orchestrator.plan.matrix import describe_knobs

    lines: list[RenderableType] = [Text.assemble(("cell ", "dim"), detail.cell_id, ("  engine ", "dim"), detail.engine,
                           ("  model ", "dim"), detail.model)]
    lines.append(Text.assemble(("knobs ", "dim"), describe_knobs(detail.knobs)))
    if detail.control_id:
        lines.append(Text.assemble(("control ", "dim"), detail.control_id))
    if run is None:
        lines.append(Text("no run recorded yet", style="yellow"))
        return Group(*lines)
    s = run.summary
    verdict = s.verdict or s.status
    grade = run.grades[0] if run.grades else None
    reason = grade.summary if grade else (s.signature or run.message or "not graded yet")
    lines.append(Text(""))
    lines.append(Text.assemble((verdict.upper(), VERDICT_STYLE.get(verdict, "bold")), "  ", reason))
    # What the grade could not measure, under the verdict it qualifies: a `partial` is
    # partial because of these (and an older grade's `clean` may carry some too).
    if notes := unmeasured_of(grade.evidence if grade else None):
        # A grid, so a long reason wraps under itself, not under the label.
        unmeasured = Table.grid(padding=(0, 1))
        unmeasured.add_column(no_wrap=True, style="yellow")
        unmeasured.add_column(overflow="fold")
        for note in notes:
            unmeasured.add_row("  not measured:", Text(note))
        lines.append(unmeasured)
    if slow := speed.low_acceptance(counters):
        # Beside the verdict, not in it: every answer may be right and the drafter useless.
        lines.append(Text.assemble(("SPEED  ", "bold yellow"), slow, (" (not graded: the verdict is about answers)", "dim")))
    when = f"run {s.run_id}, {s.status}, {s.total_s:.0f} s"
    if len(detail.runs) > 1:
        when += f" (newest of {len(detail.runs)} runs)"
    if len(run.grades) > 1:
        when += f"; graded {len(run.grades)} times, earlier: " + ", ".join(g.verdict for g in run.grades[1:])
    lines.append(Text(when, style="dim"))
    if run.layout and run.layout.get("source") == FOLLOWS_CELLS:
        lines.append(Text(f"laid out on {run.layout.get('block_tokens')}-token blocks, the block a cell's engine chose "
                          f"(its own engine's: {run.layout.get('attention_block') or 'not said'}); cells laid out on it are "
                          "graded against this run", style="dim"))
    if grade is None and run.message and run.message != reason:
        lines.append(Text(run.message.strip().splitlines()[-1][:400], style="dim"))
    return Group(*lines)


def _divergence(evidence: Mapping[str, Any], expect_by_key: Mapping[str, Any]) -> RenderableType | None:
    first = evidence.get("first")
    if not first or "key" not in first:
        return None
    where = f"session {first.get('session')} turn {first.get('turn')}"
    if first.get("token_index") is not None:
        where += f", token {first['token_index']}"
    if first.get("control_margin") is not None:
        where += f" (control's top-1/top-2 margin {first['control_margin']:.2f})"
    reason = first.get("reason")
    # "divergent" says nothing the title does not; other reasons (recall, tie-flips,
    # request failed, a symptom) say why this request is the one shown.
    title = f"First divergence at {where}" + (f" ({reason})" if reason and reason != "divergent" else "")
    # Side by side, each column folding its own text: the point is to read where the
    # two continuations part, which a wrapped single line hides.
    table = Table(title=title, title_justify="left", expand=True, show_lines=False)
    columns = [("cell", first.get("cell_text"))]
    if "control_text" in first:
        columns.append(("control", first.get("control_text")))
    truth = ground_truth(evidence, expect_by_key)
    if truth is not None:
        columns.append(("ground truth", truth))
    for name, _ in columns:
        table.add_column(name, ratio=1, overflow="fold")
    table.add_row(*[Text(text if text is not None else "-") for _, text in columns])
    if first.get("cell_tokens") or first.get("control_tokens"):
        tokens = {"cell": first.get("cell_tokens"), "control": first.get("control_tokens")}
        table.add_row(*[Text(f"next tokens {tokens[name]}" if tokens.get(name) else "", style="dim")
                        for name, _ in columns])
    if first.get("error"):
        table.add_row(*[Text(f"error: {first['error']}", style="red")] + [Text("")] * (len(columns) - 1))
    return table


def _coverage(evidence: Mapping[str, Any], counters: Mapping[str, float]) -> RenderableType | None:
    coverage = evidence.get("coverage") or {}
    lines: list[Text] = []
    recall = evidence.get("recall")
    if recall:
        lines.append(Text(f"recall {recall.get('cell')}/{recall.get('requests')} "
                          f"(control {recall.get('control')}/{recall.get('requests')})"))
    if "requests" in evidence and "identical" in evidence:
        lines.append(Text(f"{evidence['identical']}/{evidence['requests']} requests identical to control"))
    exercised = coverage.get("exercised") or {}
    flags = [f"{k} {'yes' if v else 'no'}" for k, v in exercised.items() if isinstance(v, bool)]
    if flags:
        lines.append(Text("exercised: " + ", ".join(flags)))
    for name, fired in sorted((evidence.get("planted") or {}).items()):
        # A silent set is a gap (below); a fired one says how often it planted.
        if fired:
            lines.append(Text(f"planted {name}: fired {fired} time(s) in the engine's log"))
    counts = dict(coverage.get("counters") or {}) | dict(counters)
    queries = counts.get(PREFIX_QUERIES, 0.0)
    if queries:
        hits = counts.get(PREFIX_HITS, 0.0)
        lines.append(Text(f"prefix cache hits {hits:,.0f} of {queries:,.0f} tokens ({hits / queries:.1%})"))
    for name, value in sorted(counts.items()):
        # Zero counters and the draft counters (the acceptance line reads them) are noise here.
        if value and name not in (PREFIX_HITS, PREFIX_QUERIES) and "spec_decode" not in name:
            lines.append(Text(f"{name.removeprefix('vllm:')} {value:,.0f}", style="dim"))
    for gap in coverage.get("gaps") or ():
        lines.append(Text(f"gap: {gap}", style="yellow"))
    return Group(Text("Coverage", style="bold"), *lines) if lines else None


def _shapes(evidence: Mapping[str, Any]) -> RenderableType | None:
    """Per shape: recall against the control (by where the asked line lies relative to the
    restore point), and what the engine reported of the shape's point."""
    shapes = evidence.get("shapes")
    if not shapes:
        return None
    layout = evidence.get("layout") or {}
    title = "Shapes" + (f", laid out on {layout['block_tokens']}-token blocks ({layout.get('source')})"
                        if layout.get("block_tokens") else "")
    table = Table(title=title, title_justify="left")
    for col in ("shape", "recall (control)", "before / at / after", "hits at restore point", "decode crossed",
                "drafted"):
        table.add_column(col, overflow="fold")
    for name, s in shapes.items():
        cover = s.get("coverage") or {}
        by = s.get("by_probe") or {}
        places = " / ".join(f"{by[p]['cell']}/{by[p]['requests']}" if p in by else "-" for p in ("before", "at", "after"))
        hits = cover.get("hits")
        table.add_row(
            name, f"{s.get('cell', '-')}/{s.get('requests', '-')} ({s.get('control', '-')})", places,
            f"{hits['reached']}/{hits['laid_out']}" + (f", {hits['short']} short" if hits.get("short") else "")
            if hits else "-",
            str(cover["decode_crossed"]) if "decode_crossed" in cover else "-",
            f"{cover['drafted']:,.0f}" if "drafted" in cover else "-")
    return table


def _latency(latency: Mapping[str, Any]) -> RenderableType | None:
    if not latency or not latency.get("requests"):
        return None
    table = Table(title=f"Latency, ms ({latency['requests']} requests)", title_justify="left")
    table.add_column("")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    for name, label in (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "e2e")):
        table.add_row(label, _ms(latency.get(f"{name}_p50_s")), _ms(latency.get(f"{name}_p99_s")))
    return table


def _acceptance(counters: Mapping[str, float]) -> RenderableType | None:
    r = rates(counters)
    if r.spec_acceptance is None and not r.acceptance_per_position:
        return None
    per = "  ".join(f"{i + 1}: {_pct(v)}" for i, v in enumerate(r.acceptance_per_position)) or "-"
    drafts = counters.get(SPEC_DRAFTS)
    of = f" of {drafts:,.0f} drafts" if drafts else ""
    return Text.assemble(("Draft acceptance ", "bold"), _pct(r.spec_acceptance), of, ("  per position ", "dim"), per)


def render_cell(detail: CellDetail, counters: Mapping[int, Mapping[str, float]] | None = None,
                expect_by_key: Mapping[str, Any] | None = None, fixes: Sequence[Any] = ()) -> RenderableType:
    """The human view of ``detail``; ``counters`` are each run's summed engine counters
    (db.reads.metric_totals_for), ``expect_by_key`` the newest run's expected answers,
    ``fixes`` the candidate-fix searches recorded for the cell (db.store.FixesRecord)."""
    counters = counters or {}
    run = detail.runs[0] if detail.runs else None
    run_counters = counters.get(run.summary.run_id, {}) if run is not None else {}
    parts: list[RenderableType] = [_headline(detail, run, run_counters)]
    if run is not None:
        evidence = run.grades[0].evidence if run.grades else {}
        for part in (_divergence(evidence, expect_by_key or {}), _coverage(evidence, run_counters),
                     _shapes(evidence), _latency(run.latency), _acceptance(run_counters)):
            if part is not None:
                parts += [Text(""), part]
        parts += [Text(""), Text.assemble(("log ", "dim"), run.log_path or "-",
                                          *((("  node ", "dim"), run.node) if run.node else ()))]
        if len(detail.runs) > 1:
            older = Table(title="Earlier runs", title_justify="left")
            for col in ("run", "status", "verdict", "time"):
                older.add_column(col, justify="right" if col in ("run", "time") else "left")
            for r in detail.runs[1:]:
                s = r.summary
                older.add_row(str(s.run_id), s.status, s.verdict or "-", f"{s.total_s:.0f}s")
            parts += [Text(""), older]
    for record in fixes:  # `vmatrix fixes`: which patch set turns this cell clean, oldest first
        from vmatrix.orchestrator.cli.fixes_view import render_fixes

        parts += [Text(""), render_fixes(record)]
    return Group(*parts)


def shrink_lines(shrinks: list[ShrinkRecord]) -> list[str]:
    """One line per recorded shrink of the cell (`vmatrix shrink`), oldest first."""
    out = []
    for s in shrinks:
        ran = f"{len(s.probes)} probes, {s.engine_runs} engine runs ({s.reused_runs} recorded runs read back), " \
              f"{s.wall_s:.0f} s"
        if s.result_cell_id:
            out.append(f"shrink {s.id}: {s.status}, {s.requests_before} -> {s.requests_after} requests still corrupt "
                       f"in >= {s.k} of {s.n} runs (cell {s.result_cell_id[:12]}); {ran}; matrix {s.matrix_path}")
        else:
            out.append(f"shrink {s.id}: {s.status}, no smaller workload failed in >= {s.k} of {s.n} runs; {ran}")
    return out
