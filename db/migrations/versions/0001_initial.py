"""Initial schema: sweeps, cells, runs and what a run recorded.

Revision ID: 0001
Revises:
Create Date: 2025-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Recorded results are append-only; the database (SQLite or PostgreSQL) refuses changes
# to them outright so that a stray UPDATE or DELETE cannot lose a result.
APPEND_ONLY = ("runs", "requests", "metrics", "grades")


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("spec_path", sa.String(), nullable=False),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sweeps"),
    )
    op.create_table(
        "cells",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("engine_label", sa.String(), nullable=False),
        sa.Column("env_id", sa.String(), nullable=False),
        sa.Column("vllm_version", sa.String(), nullable=False),
        sa.Column("accelerator", sa.String(), nullable=False),
        sa.Column("patches", sa.String(), nullable=True),
        sa.Column("lmcache", sa.String(), nullable=True),
        sa.Column("knobs", sa.JSON(), nullable=False),
        sa.Column("model_digest", sa.String(), nullable=False),
        sa.Column("model_name", sa.String(), nullable=False),
        sa.Column("workload_digest", sa.String(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("control_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_cells"),
    )
    op.create_table(
        "sweep_cells",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], name="fk_sweep_cells_sweep_id_sweeps"),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], name="fk_sweep_cells_cell_id_cells"),
        sa.PrimaryKeyConstraint("sweep_id", "cell_id", name="pk_sweep_cells"),
    )
    op.create_index("ix_sweep_cells_cell_id", "sweep_cells", ["cell_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.String(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("log_path", sa.String(), nullable=True),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("gpu_ids", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], name="fk_runs_cell_id_cells"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], name="fk_runs_sweep_id_sweeps"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_runs_cell_id_finished_at", "runs", ["cell_id", "finished_at"])
    op.create_table(
        "requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("session", sa.String(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("token_ids", sa.JSON(), nullable=False),
        sa.Column("logprobs", sa.JSON(), nullable=False),
        sa.Column("margins", sa.JSON(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("finish_reason", sa.String(), nullable=True),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("e2e_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_requests_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_requests"),
    )
    op.create_index("ix_requests_run_id", "requests", ["run_id"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_metrics_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_metrics"),
    )
    op.create_index("ix_metrics_run_id", "metrics", ["run_id"])
    op.create_table(
        "grades",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("control_run_id", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.String(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_grades_run_id_runs"),
        sa.ForeignKeyConstraint(["control_run_id"], ["runs.id"], name="fk_grades_control_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_grades"),
    )
    op.create_index("ix_grades_run_id", "grades", ["run_id"])

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table in APPEND_ONLY:
            for action in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} are append-only'); END"
                )
    elif dialect == "postgresql":
        # The same guard in PL/pgSQL, raised as an integrity violation (SQLSTATE 23000) so
        # that callers see the same IntegrityError as on SQLite. TRUNCATE skips row
        # triggers, so it gets a statement trigger of its own.
        op.execute(
            "CREATE FUNCTION vmatrix_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION '% are append-only', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation'; "
            "END $$"
        )
        for table in APPEND_ONLY:
            for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
                )


def downgrade() -> None:
    # Dropping a table drops its triggers and indices with it.
    for table in ("grades", "metrics", "requests", "runs", "sweep_cells", "cells", "sweeps"):
        op.drop_table(table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION vmatrix_append_only()")
