"""Per-user cost budgets (issue 26 item 8): users.budget_daily_usd / budget_monthly_usd and the
in-flight reservations of LLM calls (budget_reservations)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 10:55:00

The limits are nullable: null = the service default (ZCBOT_USER_DAILY_BUDGET_USD / _MONTHLY_); 0 = no
limit for that user. A reservation row lives for one LLM call (reserved before, deleted once its
usage event is written); a row left by a runner that died is ignored after an hour (zcbot_core.accounts.budgets).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("budget_daily_usd", sa.Numeric(14, 6), nullable=True))
    op.add_column("users", sa.Column("budget_monthly_usd", sa.Numeric(14, 6), nullable=True))
    op.create_table(
        "budget_reservations",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(128), sa.ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("amount", sa.Numeric(14, 6), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_budget_reservations_user", "budget_reservations", ["user_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_budget_reservations_user", table_name="budget_reservations")
    op.drop_table("budget_reservations")
    op.drop_column("users", "budget_monthly_usd")
    op.drop_column("users", "budget_daily_usd")
