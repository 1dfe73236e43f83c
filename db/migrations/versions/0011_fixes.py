"""Record what `vmatrix fixes` found for a cell: each candidate patch set's verdict beside it.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fixes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.String(), nullable=False),
        sa.Column("control_id", sa.String(), nullable=True),
        sa.Column("engine_label", sa.String(), nullable=False),
        sa.Column("release", sa.String(), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("together", sa.Boolean(), nullable=False),
        sa.Column("rows", sa.JSON(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], name="fk_fixes_cell_id_cells"),
        sa.ForeignKeyConstraint(["control_id"], ["cells.id"], name="fk_fixes_control_id_cells"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], name="fk_fixes_sweep_id_sweeps"),
        sa.PrimaryKeyConstraint("id", name="pk_fixes"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_fixes_cell_id", "fixes", ["cell_id"])
    # Measured results, like runs, grades and bisects: append-only (the function is migration 0001's).
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER fixes_no_{action.lower()} BEFORE {action} ON fixes "
                "BEGIN SELECT RAISE(ABORT, 'fixes are append-only'); END"
            )
    elif dialect == "postgresql":
        for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
            op.execute(
                f"CREATE TRIGGER fixes_no_{action.lower()} BEFORE {action} ON fixes "
                f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
            )


def downgrade() -> None:
    op.drop_table("fixes")  # its triggers go with it
