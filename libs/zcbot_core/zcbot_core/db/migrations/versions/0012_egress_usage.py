"""egress_usage (issue 40): per-user egress bytes per hour, shared by every executor host

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 16:30:00

The egress cap (ZCBOT_USER_EGRESS_MB_PER_DAY) was counted in each executor's memory; these rows
make it one count across hosts and restarts (zcbot_core/egress_usage.py, docs/decisions.md).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "egress_usage",
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("hour", sa.BigInteger, primary_key=True),
        sa.Column("bytes", sa.BigInteger, server_default="0", nullable=False),
    )


def downgrade() -> None:
    op.drop_table("egress_usage")
