"""Noise floor per sweep and control (grading.calibrate); early-abort columns on runs.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy of the table): SQLite keeps the append-only
    # triggers on `runs` (PostgreSQL does anyway), and existing runs read NULL.
    op.add_column("runs", sa.Column("aborted_early", sa.Boolean(), nullable=True))
    op.add_column("runs", sa.Column("skipped_requests", sa.JSON(), nullable=True))
    op.create_table(
        "noise_floors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("control_cell_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("repeat_run_id", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("identical", sa.Integer(), nullable=False),
        sa.Column("flips", sa.Integer(), nullable=False),
        sa.Column("max_drift", sa.Float(), nullable=False),
        sa.Column("max_flip_margin", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], name="fk_noise_floors_sweep_id_sweeps"),
        sa.ForeignKeyConstraint(["control_cell_id"], ["cells.id"], name="fk_noise_floors_control_cell_id_cells"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_noise_floors_run_id_runs"),
        sa.ForeignKeyConstraint(["repeat_run_id"], ["runs.id"], name="fk_noise_floors_repeat_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_noise_floors"),
    )
    op.create_index("ix_noise_floors_sweep_id_control_cell_id", "noise_floors", ["sweep_id", "control_cell_id"])
    # Measured results, like runs and grades: append-only (the function is migration 0001's).
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER noise_floors_no_{action.lower()} BEFORE {action} ON noise_floors "
                "BEGIN SELECT RAISE(ABORT, 'noise_floors are append-only'); END"
            )
    elif dialect == "postgresql":
        for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
            op.execute(
                f"CREATE TRIGGER noise_floors_no_{action.lower()} BEFORE {action} ON noise_floors "
                f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
            )


def downgrade() -> None:
    op.drop_table("noise_floors")
    # ALTER TABLE DROP COLUMN (SQLite >= 3.35), not a batch copy that would drop the triggers.
    op.drop_column("runs", "skipped_requests")
    op.drop_column("runs", "aborted_early")
