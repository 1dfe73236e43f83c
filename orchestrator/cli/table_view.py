"""`vmatrix results table` on a terminal narrower than the lookup table.

The grid (db/table.py) is as wide as its longest table cell: on the quickstart's four
cells that is ~110 columns, and a store of many runs is wider still. Folded into 80
columns a grid reads as one word per line in every column, so a narrow terminal gets
the same table as a list instead: one block per row value, one line per column value
that has a result, the corner's axis names at the top. Nothing is dropped; `--format
markdown` or a wider terminal gives the grid.
"""

from __future__ import annotations

from rich.cells import cell_len

from vmatrix.db.table import Table


def fits(text: str, width: int) -> bool:
    return all(cell_len(line) <= width for line in text.splitlines())


def render_narrow(table: Table, width: int) -> str:
    """``table`` as a list that fits ``width`` columns: a result too long for its line
    wraps under itself, indented, never into the next column."""
    import textwrap

    label = max((cell_len(c) for c in table.cols), default=0)
    label = min(label, width // 3)
    out = [f"each {', '.join(table.row_keys)}, then its {', '.join(table.col_keys)}:", ""]
    for row in table.rows:
        out.append(row)
        for col in table.cols:
            text = table.cells.get((row, col))
            if text is None:
                continue
            head = f"  {col:<{label}}  "
            if cell_len(head) > width // 2:
                head = f"  {col}\n" + " " * (label // 2 + 4)
            indent = " " * (label + 4)
            for i, part in enumerate(text.split("\n")):
                lines = textwrap.wrap(part, width=max(20, width - len(indent)), break_on_hyphens=False) or [""]
                first = head if i == 0 else indent
                out.append(first + lines[0])
                out += [indent + line for line in lines[1:]]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
