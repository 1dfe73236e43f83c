"""The table ``vmatrix fixes`` prints and ``results show`` shows beside a cell: the cell as
recorded, then each candidate patch set, what it did, and the one-line answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vmatrix.db.fixes import result_text, run_text, shapes_text, wrong_text

RESULT_STYLE = {"clean": "green", "partial": "bold yellow3", "corrupt": "bold red", "crashed": "bold red",
                "startup_failed": "red", "unexercised": "yellow", "degraded": "yellow"}


def fixes_table(rows: Sequence[Mapping[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    shapes = "coverage per shape: right/graded (control's), hits at the restore point"
    for col in ("candidate", "engine", "result", "wrong answers", "recall", shapes, "run", "why"):
        table.add_column(col, overflow="fold")
    for row in rows:
        result = result_text(row)
        table.add_row(Text(row["candidate"], style="bold" if row["candidate"] != "as recorded" else "dim"),
                      row.get("engine") or "-", Text(result, style=RESULT_STYLE.get(row.get("verdict") or "", "")),
                      wrong_text(row), row.get("recall") or "-", shapes_text(row), run_text(row),
                      Text((row.get("reason") or "")[:160]))
    return table


def render_fixes(record: Any) -> RenderableType:
    """One stored search (``db.store.FixesRecord``): its table, then its answer."""
    title = (f"Candidate fixes (fixes {record.id}" + (f", sweep {record.sweep_id}" if record.sweep_id else "")
             + f"; each graded against control {(record.control_id or '-')[:12]})")
    return Group(fixes_table(record.rows, title), Text(record.answer, style="bold"))
