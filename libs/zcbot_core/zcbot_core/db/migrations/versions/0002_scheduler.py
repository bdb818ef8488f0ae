"""scheduler bookkeeping on scheduled_jobs

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:00:00

- `run_deadline_at`: set when a firing starts a run (clock + timeout_seconds), cleared when the
  run's outcome is recorded; non-null means "a run of this job is in flight".
- `cancel_requested_at`: when the scheduler asked the run to stop because it hit its timeout
  (the outcome then counts as an error).
- `notified_run_id`: the run whose summary was pushed (the notify fallback pushes once per run).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('scheduled_jobs', sa.Column('run_deadline_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('scheduled_jobs', sa.Column('cancel_requested_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('scheduled_jobs', sa.Column('notified_run_id', sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column('scheduled_jobs', 'notified_run_id')
    op.drop_column('scheduled_jobs', 'cancel_requested_at')
    op.drop_column('scheduled_jobs', 'run_deadline_at')
