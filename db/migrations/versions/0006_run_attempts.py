"""Record each start of a cell's task, so a retry after a lost node is on record.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: batch mode would copy `runs` into a new table on SQLite and
    # lose its append-only triggers.
    op.add_column("runs", sa.Column("attempts", sa.JSON(), server_default="[]", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("attempts")
