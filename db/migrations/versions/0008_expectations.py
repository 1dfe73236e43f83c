"""Record what each request's answer should be, and where the model's answer ended.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (NULL on older rows: no expectation then, answer end not known):
    # batch mode would copy `requests` into a new table on SQLite and lose its
    # append-only triggers.
    op.add_column("requests", sa.Column("expect", sa.JSON(), nullable=True))
    op.add_column("requests", sa.Column("answer_chars", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("answer_chars")
        batch.drop_column("expect")
