"""Noise floors record how far the control's top-1/top-2 margins move against themselves.

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
    # A plain ADD COLUMN (NULL on floors stored before: not measured), as 0008.
    op.add_column("noise_floors", sa.Column("max_margin_drift", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("noise_floors") as batch:
        batch.drop_column("max_margin_drift")
