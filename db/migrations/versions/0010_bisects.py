"""Record what bisects found, beside the cells they bisected (vmatrix watch, vmatrix bisect).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bisects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("old_cell_id", sa.String(), nullable=True),
        sa.Column("new_cell_id", sa.String(), nullable=True),
        sa.Column("mode", sa.String(), nullable=False),
        sa.Column("distribution", sa.String(), nullable=False),
        sa.Column("good", sa.String(), nullable=False),
        sa.Column("bad", sa.String(), nullable=False),
        sa.Column("find_fix", sa.Boolean(), nullable=False),
        sa.Column("predicate", sa.String(), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("last_old", sa.String(), nullable=True),
        sa.Column("first_new", sa.String(), nullable=True),
        sa.Column("untested", sa.JSON(), nullable=False),
        sa.Column("neighbours", sa.JSON(), nullable=False),
        sa.Column("repo", sa.String(), nullable=True),
        sa.Column("continue_command", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["old_cell_id"], ["cells.id"], name="fk_bisects_old_cell_id_cells"),
        sa.ForeignKeyConstraint(["new_cell_id"], ["cells.id"], name="fk_bisects_new_cell_id_cells"),
        sa.PrimaryKeyConstraint("id", name="pk_bisects"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_bisects_new_cell_id", "bisects", ["new_cell_id"])
    # Measured results, like runs and grades: append-only (the function is migration 0001's).
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER bisects_no_{action.lower()} BEFORE {action} ON bisects "
                "BEGIN SELECT RAISE(ABORT, 'bisects are append-only'); END"
            )
    elif dialect == "postgresql":
        for action, each in (("UPDATE", "ROW"), ("DELETE", "ROW"), ("TRUNCATE", "STATEMENT")):
            op.execute(
                f"CREATE TRIGGER bisects_no_{action.lower()} BEFORE {action} ON bisects "
                f"FOR EACH {each} EXECUTE FUNCTION vmatrix_append_only()"
            )


def downgrade() -> None:
    op.drop_table("bisects")  # its triggers go with it
