"""One narrow row per run with what comparisons read: per-request timings and counter totals.

Comparing two groups of 5,000 cells read all of their million request rows, and a request
row is wide (token ids, logprobs, margins, text): about 5 s on a quiet machine. The store
now writes a ``run_samples`` row with each run (encoding in ``db/samples.py``); this
migration creates the table, makes it append-only like the rows it is derived from, and
backfills it for every run already recorded.

The backfill computes the same values as ``db.samples.summary_row`` but is written out
here, frozen, so that later changes to the application cannot change what this migration
did. Token counts come from the database (``json_array_length``, in SQLite and
PostgreSQL alike), so no token list is decoded in Python.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import json
import math
import struct
from collections import defaultdict
from itertools import groupby
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None

RUNS_PER_BATCH = 2000


def _pack(values: list[float | None]) -> bytes:
    return struct.pack(f"<{len(values)}d", *(math.nan if v is None else float(v) for v in values))


def _decode_tps(n_tokens: int | None, ttft: float | None, e2e: float | None) -> float | None:
    if ttft is None or e2e is None or n_tokens is None or n_tokens < 2 or e2e <= ttft:
        return None
    return (n_tokens - 1) / (e2e - ttft)


def _backfill(bind: sa.Connection, run_samples: sa.Table) -> None:
    meta = sa.MetaData()
    runs = sa.Table("runs", meta, sa.Column("id", sa.Integer))
    requests = sa.Table(
        "requests", meta,
        *(sa.Column(name, t) for name, t in (
            ("id", sa.Integer), ("run_id", sa.Integer), ("key", sa.String), ("phase", sa.String),
            ("token_ids", sa.JSON), ("ttft_s", sa.Float), ("e2e_s", sa.Float), ("error", sa.Text),
        )),
    )
    metrics = sa.Table("metrics", meta, sa.Column("run_id", sa.Integer), sa.Column("name", sa.String),
                       sa.Column("value", sa.Float))
    run_ids = bind.execute(sa.select(runs.c.id).order_by(runs.c.id)).scalars().all()
    for start in range(0, len(run_ids), RUNS_PER_BATCH):
        low, high = run_ids[start], run_ids[min(start + RUNS_PER_BATCH, len(run_ids)) - 1]
        per_run: dict[int, dict[str, Any]] = {}
        rows = bind.execute(
            sa.select(requests.c.run_id, requests.c.key, requests.c.phase, requests.c.error, requests.c.ttft_s,
                      requests.c.e2e_s, sa.func.json_array_length(requests.c.token_ids))
            .where(requests.c.run_id.between(low, high))
            .order_by(requests.c.run_id, requests.c.id)
        )
        for run_id, group in groupby(rows, key=itemgetter(0)):
            keys, phases, ttft, decode = [], [], [], []
            for _, key, phase, error, ttft_s, e2e_s, n_tokens in group:
                keys.append(key)
                phases.append(phase)
                ok = error is None
                ttft.append(ttft_s if ok else None)
                decode.append(_decode_tps(n_tokens, ttft_s, e2e_s) if ok else None)
            per_run[run_id] = {
                "run_id": run_id, "requests": len(keys),
                "keys": json.dumps(keys, ensure_ascii=False), "phases": json.dumps(phases, ensure_ascii=False),
                "ttft_s": _pack(ttft), "decode_tps": _pack(decode), "counters": {},
            }
        counters: dict[int, dict[str, float]] = defaultdict(dict)
        for run_id, name, total in bind.execute(
            sa.select(metrics.c.run_id, metrics.c.name, sa.func.sum(metrics.c.value))
            .where(metrics.c.run_id.between(low, high))
            .group_by(metrics.c.run_id, metrics.c.name)
        ):
            counters[run_id][name] = total
        for run_id, totals in counters.items():
            per_run.setdefault(run_id, {
                "run_id": run_id, "requests": 0, "keys": "[]", "phases": "[]", "ttft_s": b"", "decode_tps": b"",
                "counters": {},
            })["counters"] = totals
        if per_run:
            bind.execute(sa.insert(run_samples), [per_run[r] for r in sorted(per_run)])


def upgrade() -> None:
    run_samples = op.create_table(
        "run_samples",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("keys", sa.Text(), nullable=False),
        sa.Column("phases", sa.Text(), nullable=False),
        sa.Column("ttft_s", sa.LargeBinary(), nullable=False),
        sa.Column("decode_tps", sa.LargeBinary(), nullable=False),
        sa.Column("counters", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_run_samples_run_id_runs"),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_samples"),
    )
    _backfill(op.get_bind(), run_samples)
    # Append-only, like the rows it summarises (the function is migration 0001's).
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER run_samples_no_{action.lower()} BEFORE {action} ON run_samples "
                "BEGIN SELECT RAISE(ABORT, 'run_samples are append-only'); END"
            )
    elif dialect == "postgresql":
        for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
            op.execute(
                f"CREATE TRIGGER run_samples_no_{action.lower()} BEFORE {action} ON run_samples "
                f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
            )


def downgrade() -> None:
    op.drop_table("run_samples")  # its triggers go with it
