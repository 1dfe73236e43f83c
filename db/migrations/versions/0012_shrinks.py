"""Record what `vmatrix shrink` found, beside the cell it shrank.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shrinks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("predicate", sa.String(), nullable=False),
        sa.Column("levels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("requests_before", sa.Integer(), nullable=False),
        sa.Column("requests_after", sa.Integer(), nullable=False),
        sa.Column("kept", sa.JSON(), nullable=False),
        sa.Column("result_cell_id", sa.String(), nullable=True),
        sa.Column("probes", sa.JSON(), nullable=False),
        sa.Column("engine_runs", sa.Integer(), nullable=False),
        sa.Column("reused_runs", sa.Integer(), nullable=False),
        sa.Column("matrix_path", sa.String(), nullable=True),
        sa.Column("matrix_text", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], name="fk_shrinks_cell_id_cells"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_shrinks_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_shrinks"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_shrinks_cell_id", "shrinks", ["cell_id"])
    # Measured results, like runs, grades and bisects: append-only (the function is migration 0001's).
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER shrinks_no_{action.lower()} BEFORE {action} ON shrinks "
                "BEGIN SELECT RAISE(ABORT, 'shrinks are append-only'); END"
            )
    elif dialect == "postgresql":
        for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
            op.execute(
                f"CREATE TRIGGER shrinks_no_{action.lower()} BEFORE {action} ON shrinks "
                f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
            )


def downgrade() -> None:
    op.drop_table("shrinks")  # its triggers go with it
