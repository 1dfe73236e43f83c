"""Runs as flat rows for spreadsheets and dataframes: CSV, JSON or Parquet.

One row per run (reruns included, so nothing recorded is hidden), with the cell's knobs,
the run's timings and its counters totalled over phases spread into columns. Every row
has every column, so the file loads as one table whatever knobs each cell set.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import case, func, select

from vmatrix.db.counters import rates
from vmatrix.db.models import CellRow, RequestRow, Run, SweepCell
from vmatrix.db.queries import _with_verdicts, knob_text, metric_totals_for
from vmatrix.db.store import Store
from vmatrix.errors import ExportError

Format = Literal["csv", "json", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "json", "parquet")


def _flat_knob(value: Any) -> Any:
    # Scalars keep their type for dataframes; structured knobs become their table text.
    return knob_text(value) if isinstance(value, (dict, list)) else value


def export_rows(store: Store, sweep_id: int | None = None) -> list[dict[str, Any]]:
    """Every run (recorded by one sweep, or all), oldest first, as flat dicts."""
    counts = (
        select(
            RequestRow.run_id,
            func.count().label("requests"),
            func.sum(case((RequestRow.error.is_not(None), 1), else_=0)).label("failed"),
        )
        .group_by(RequestRow.run_id)
        .subquery()
    )
    stmt = _with_verdicts(
        select(Run, CellRow, SweepCell.role, counts.c.requests, counts.c.failed)
        .join(CellRow, CellRow.id == Run.cell_id)
        .outerjoin(SweepCell, (SweepCell.sweep_id == Run.sweep_id) & (SweepCell.cell_id == Run.cell_id))
        .outerjoin(counts, counts.c.run_id == Run.id)
    ).order_by(Run.id)
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    with store.session() as session:
        records = session.execute(stmt).all()
    totals = metric_totals_for(store, (run.id for run, *_ in records))

    knob_names = list(dict.fromkeys(k for _, cell, *_ in records for k in cell.knobs))
    timing_names = list(dict.fromkeys(k for run, *_ in records for k in run.timings))
    metric_names = sorted({name for t in totals.values() for name in t})
    rows = []
    for run, cell, role, requests, failed, verdict in records:
        run_totals = totals.get(run.id, {})
        derived = rates(run_totals)
        rows.append(
            {
                "run_id": run.id,
                "sweep_id": run.sweep_id,
                "cell_id": cell.id,
                "role": role,
                "engine": cell.engine_label,
                "vllm_version": cell.vllm_version,
                "accelerator": cell.accelerator,
                "patches": cell.patches,
                "model": cell.model_name,
                **{f"knob.{k}": _flat_knob(cell.knobs.get(k)) for k in knob_names},
                "status": run.status,
                "verdict": verdict,
                "signature": run.signature,
                "node": run.node,
                "log_path": run.log_path,
                "started_at": run.started_at,
                "finished_at": run.finished_at,
                **{f"timing.{k}": run.timings.get(k) for k in timing_names},
                "requests": requests or 0,
                "failed_requests": failed or 0,
                "prefix_hit_rate": derived.prefix_hit_rate,
                "spec_acceptance": derived.spec_acceptance,
                **{f"metric.{k}": run_totals.get(k) for k in metric_names},
            }
        )
    return rows


def _write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["run_id"])
        writer.writeheader()
        writer.writerows(rows)  # None is written as an empty field


def _write_json(rows: Sequence[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps(list(rows), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError.naming("{format} parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    names = list(rows[0]) if rows else ["run_id"]
    columns = {}
    for name in names:
        values = [row[name] for row in rows]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # A knob whose type changed between releases of the spec: keep it, as text.
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    pq.write_table(pa.table(columns), path)


def export_runs(store: Store, path: Path, fmt: Format, sweep_id: int | None = None) -> int:
    """Write the runs to ``path``; returns how many rows were written."""
    writers = {"csv": _write_csv, "json": _write_json, "parquet": _write_parquet}
    if fmt not in writers:
        raise ExportError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    rows = export_rows(store, sweep_id)
    writers[fmt](rows, path)
    return len(rows)
