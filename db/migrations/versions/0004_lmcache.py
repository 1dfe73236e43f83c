"""Requests record how many engine restarts came before them (trace restart points).

A replay that restarts the engine mid-trace (to test what LMCache L2 gives back)
marks every later request; older runs never restarted, so they read 0.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN keeps the table (and its append-only triggers) as it is.
    op.add_column("requests", sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    # Not a batch copy: that would recreate the table without its append-only triggers.
    op.execute("ALTER TABLE requests DROP COLUMN restarts")
