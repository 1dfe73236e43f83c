"""Record each request's inter-token latencies, as the replay now measures them.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (NULL on older rows: not measured then): batch mode would copy
    # `requests` into a new table on SQLite and lose its append-only triggers.
    op.add_column("requests", sa.Column("itl_s", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("itl_s")
