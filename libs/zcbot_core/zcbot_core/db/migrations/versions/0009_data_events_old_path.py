"""data_events.old_path (issue 29): where a renamed file or folder was before, so the history of a
path follows it across renames (docs/decisions.md)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 15:30:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("data_events", sa.Column("old_path", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("data_events", "old_path")
