"""Record what a shaped workload was laid out on, and each request's prefix-cache hit.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs, NULL on older rows (no layout recorded, hits not reported): batch
    # mode would copy the tables on SQLite and lose their append-only triggers.
    op.add_column("runs", sa.Column("layout", sa.JSON(), nullable=True))
    op.add_column("requests", sa.Column("cached_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("cached_tokens")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("layout")
