"""data_events.undoes_run_id and the indexes the file-history pruning reads (issue 29 follow-up)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 19:00:00

`undoes_run_id` names the run a revert's rows undid (set only when that revert left nothing to do:
no conflict, no missing version), so the stored history can say a run's file changes are undone.
The `created_at` indexes let the pruning (zcbot_core/filehistory/prune.py) find old rows without a
full scan (docs/decisions.md).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("data_events", sa.Column("undoes_run_id", sa.String(64), nullable=True))
    op.create_index("ix_data_events_undoes", "data_events", ["undoes_run_id", "id"],
                    postgresql_where=sa.text("undoes_run_id IS NOT NULL"))
    op.create_index("ix_data_events_created", "data_events", ["created_at"])
    op.create_index("ix_file_reports_recorded_created", "file_reports_recorded", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_file_reports_recorded_created", table_name="file_reports_recorded")
    op.drop_index("ix_data_events_created", table_name="data_events")
    op.drop_index("ix_data_events_undoes", table_name="data_events")
    op.drop_column("data_events", "undoes_run_id")
