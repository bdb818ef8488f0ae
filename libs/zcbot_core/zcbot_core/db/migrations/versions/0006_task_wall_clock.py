"""tasks.wall_clock_seconds: a task's own wall-clock backstop (issue 26 item 4)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:45:00

Nullable: existing tasks keep the service default (ZCBOT_RUN_WALL_CLOCK_SECONDS).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("wall_clock_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("tasks", "wall_clock_seconds")
