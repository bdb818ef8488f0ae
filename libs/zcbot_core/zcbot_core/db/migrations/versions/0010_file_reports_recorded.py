"""file_reports_recorded (issue 29 follow-up): the background file-changes reports already recorded,
so a report redelivered after its rows were written (a runner died before its ack) writes nothing

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 16:50:00

One row per (user, report id = the executor's proc id), inserted in the same transaction as the
report's `data_events` rows (docs/decisions.md).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "file_reports_recorded",
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("report_id", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("file_reports_recorded")
