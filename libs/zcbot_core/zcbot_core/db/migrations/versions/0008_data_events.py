"""data_events (issue 29): one row per file mutation in a user root, with the kept version's hash

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 13:10:00

The version bytes live on disk in `<storage>/.versions/<user>/` (zcbot_core.filehistory.store);
this table is the log of intent (who, which task and run, what kind) and the index of versions.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "data_events",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(32), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_data_events_user_path", "data_events", ["user_id", "path", "id"])
    op.create_index("ix_data_events_run", "data_events", ["run_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_data_events_run", table_name="data_events")
    op.drop_index("ix_data_events_user_path", table_name="data_events")
    op.drop_table("data_events")
