"""``vmatrix traces synth|inspect|import``: make, read and convert replay traces.

Kept apart from ``app.py`` (which wires ``traces_app`` in) and free of imports
from it. A bad trace or input file is one error line naming file and line, exit 2,
like a bad matrix file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vmatrix.jobs.trace_synth import MIX_KINDS, synth_trace
from vmatrix.jobs.traces import Trace, load_trace, request_messages, save_trace, trace_digest
from vmatrix.orchestrator.cli.common import Commands, console, err, fail

traces_app = typer.Typer(cls=Commands, no_args_is_help=True, help="Agent-session traces: synthesize, import, inspect.")



@traces_app.command("synth")
def synth(
    out: Path,
    seed: Annotated[int, typer.Option(help="Same seed and options: byte-identical file.")] = 0,
    sessions: Annotated[int, typer.Option(help="Sessions that run turn by turn.")] = 3,
    turns: Annotated[int, typer.Option(help="Turns per session.")] = 3,
    prefix_tokens: Annotated[int, typer.Option(help="Shared prefix size, in canary tokens (100k+ is fine).")] = 1500,
    switches: Annotated[int, typer.Option(help="Agent switches: late one-turn sessions on the warm prefix.")] = 1,
    mix: Annotated[str, typer.Option(help=f"Comma-separated request kinds, rotated: {','.join(MIX_KINDS)}.")] = ",".join(MIX_KINDS),
    name: Annotated[str | None, typer.Option(help="Trace name (default: from the options).")] = None,
    restart_after: Annotated[list[str] | None, typer.Option(help="Restart the engine after this phase (repeatable).")] = None,
) -> None:
    """Write a deterministic synthetic trace in the canary's language to OUT."""
    try:
        trace = synth_trace(seed, sessions, turns, prefix_tokens, switches,
                            mix=[m.strip() for m in mix.split(",") if m.strip()], name=name,
                            restart_after=restart_after or ())
        save_trace(trace, out)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    console.print(f"wrote {out}: {len(trace.sessions)} sessions, {len(trace.schedule.phases)} phases, "
                  f"digest {trace_digest(trace)[:12]}", highlight=False)


@traces_app.command("import")
def import_(
    src: Path,
    out: Path,
    fmt: Annotated[str, typer.Option("--format", help="openai, sharegpt or vllm-custom.")] = "openai",
    name: Annotated[str | None, typer.Option(help="Trace name (default: the input's file name).")] = None,
    group: Annotated[int, typer.Option(help="openai: which shared prefix, 0 = the most used.")] = 0,
    system_file: Annotated[Path | None, typer.Option(help="sharegpt, vllm-custom: shared system prompt text.")] = None,
    limit: Annotated[int | None, typer.Option(help="sharegpt, vllm-custom: at most this many sessions.")] = None,
    phase_size: Annotated[int | None, typer.Option(help="At most this many requests per phase.")] = None,
) -> None:
    """Convert SRC (a request log or a vllm bench dataset) into a trace at OUT."""
    from vmatrix.jobs.importers import IMPORTERS

    if fmt not in IMPORTERS:
        fail(f"--format must be one of {', '.join(IMPORTERS)}, got {fmt!r}")
    kwargs: dict[str, object] = {"name": name, "phase_size": phase_size}
    if fmt == "openai":
        if system_file or limit is not None:
            fail("--system-file and --limit apply to sharegpt and vllm-custom only")
        kwargs["group"] = group
    else:
        kwargs["limit"] = limit
        if system_file is not None:
            try:
                kwargs["system"] = system_file.read_text(encoding="utf-8")
            except OSError as exc:
                fail(f"{system_file}: cannot read: {exc.strerror}")
    try:
        trace, report = IMPORTERS[fmt](src, **kwargs)
        save_trace(trace, out)
    except OSError as exc:
        fail(f"{out}: cannot write: {exc.strerror}")
    skipped = f", {report.skipped} left out" if report.skipped else ""
    note = f" ({report.note})" if report.note else ""
    console.print(f"wrote {out}: {report.sessions} sessions from {report.requests} records{skipped}{note}",
                  highlight=False, soft_wrap=True)


class _Counter:
    """Token counts of texts: a real tokenizer when given one, else whitespace words."""

    def __init__(self, tokenizer_dir: Path | None) -> None:
        self.exact = False
        self.label = "words (whitespace estimate, not tokens; pass --tokenizer DIR for token counts)"
        self._tok = None
        self._cache: dict[str, int] = {}
        if tokenizer_dir is None:
            return
        path = tokenizer_dir / "tokenizer.json"
        if not path.is_file():
            fail(f"{tokenizer_dir}: no tokenizer.json in this directory")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            self.label = "words (whitespace estimate: the `tokenizers` package is not installed)"
            return
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 (the library raises its own exception types)
            fail(f"{path}: cannot load tokenizer: {exc}")
        self.exact = True
        self.label = f"tokens ({path}; message text only, chat template not counted)"

    def count(self, text: str) -> int:
        if text not in self._cache:
            if self._tok is not None:
                self._cache[text] = len(self._tok.encode(text, add_special_tokens=False).ids)
            else:
                self._cache[text] = len(text.split())
        return self._cache[text]


@traces_app.command("inspect")
def inspect(
    file: Path,
    tokenizer: Annotated[Path | None, typer.Option(help="Model directory with tokenizer.json.")] = None,
) -> None:
    """Print the sizes of FILE's shared prefix, sessions and turns, and its schedule."""
    trace = load_trace(file)
    counter = _Counter(tokenizer)
    _show(_table(trace, counter), counter)


def _table(trace: Trace, counter: _Counter) -> Table:
    system = trace.prefix.render()
    phase_of = {req: ph.name for ph in trace.schedule.phases for req in ph.requests}
    restarts = ", ".join(trace.schedule.restart_after) or "none"
    table = Table(title=f"{trace.name}: shared prefix {counter.count(system)}, {len(trace.sessions)} sessions, "
                        f"{len(trace.schedule.phases)} phases, restart after: {restarts}",
                  caption=f"counts are {counter.label}; digest {trace_digest(trace)[:12]}")
    for col, justify in (("session", "left"), ("turn", "right"), ("phase", "left"), ("new input", "right"),
                         ("recorded answer", "right"), ("prompt", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in trace.sessions:
        for i, t in enumerate(s.turns):
            prev_tools = s.turns[i - 1].tool_results if i else ()
            new = counter.count(t.user) + sum(counter.count(r) for r in prev_tools)
            prompt = sum(counter.count(text) for _, text in request_messages(trace, s, i, system))
            table.add_row(s.id, str(i), phase_of.get((s.id, i), "-"), str(new), str(counter.count(t.assistant)),
                          str(prompt))
    return table


def _show(table: Table, counter: _Counter) -> None:
    if not counter.exact:
        err.print(f"note: {counter.label}", highlight=False)
    if console.is_terminal:
        console.print(table)
    else:
        width = Console(width=10_000).measure(table).maximum
        Console(file=sys.stdout, width=width, color_system=None).print(table)
