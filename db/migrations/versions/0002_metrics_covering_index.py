"""Covering index for counter totals per run.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_metrics_run_id_name_value", "metrics", ["run_id", "name", "value"])


def downgrade() -> None:
    op.drop_index("ix_metrics_run_id_name_value", table_name="metrics")
