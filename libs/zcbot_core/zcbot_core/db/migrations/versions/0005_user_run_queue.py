"""per-user FIFO queue of runs over the concurrency cap (issue 26 item 2, Slark D-5)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:30:00

Over the per-user cap a run no longer gets 429: it `waits` (a task status, not published to JetStream)
in its user's FIFO (by `run_queued_at`), bounded by `p_max_waiting`; only a full queue is refused
(`quota_waiting`). `tasks.run_request` keeps what the run's request carries (origin, scheduled job,
grant) until it is published. `zcbot_submit_run_v2` is v1 plus that branch (v1 stays for a rolling
upgrade); `zcbot_promote_waiting_v1` starts the user's oldest waiting runs into the free slots, with
the user row held (the lock every submit takes first), so a slot is never given twice and a run that
starts waiting concurrently is seen (READ COMMITTED: each statement's snapshot follows the lock).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

SUBMIT_RUN_V2 = """
CREATE OR REPLACE FUNCTION zcbot_submit_run_v2(
    p_user text, p_task text, p_run text, p_payload jsonb, p_events_from bigint, p_channel text,
    p_max_active bigint, p_max_queued bigint, p_max_waiting bigint, p_request jsonb)
RETURNS TABLE (outcome text, detail text, message_idx integer, counted bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    task_channel text;
    task_status text;
    n_active bigint;
    n_queued bigint;
    n_waiting bigint;
    new_status text := 'queued';
    new_idx integer;
BEGIN
    PERFORM 1 FROM users WHERE user_id = p_user FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_user'::text, NULL::text, NULL::integer, NULL::bigint;
        RETURN;
    END IF;
    SELECT t.channel, t.run_status INTO task_channel, task_status
      FROM tasks t WHERE t.task_id = p_task AND t.user_id = p_user AND t.deleted_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_task'::text, NULL::text, NULL::integer, NULL::bigint;
        RETURN;
    END IF;
    IF p_channel IS NOT NULL AND task_channel IS DISTINCT FROM p_channel THEN
        RETURN QUERY SELECT 'wrong_channel'::text, task_channel, NULL::integer, NULL::bigint;
        RETURN;
    END IF;
    IF task_status IN ('queued', 'running', 'cancelling', 'waiting') THEN
        RETURN QUERY SELECT 'active'::text, task_status, NULL::integer, NULL::bigint;
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE t.user_id = p_user), count(*) FILTER (WHERE t.run_status = 'queued')
      INTO n_active, n_queued
      FROM tasks t WHERE t.run_status IN ('queued', 'running', 'cancelling');
    IF n_active >= p_max_active THEN
        SELECT count(*) INTO n_waiting FROM tasks t WHERE t.user_id = p_user AND t.run_status = 'waiting';
        IF n_waiting >= p_max_waiting THEN
            RETURN QUERY SELECT 'quota_waiting'::text, NULL::text, NULL::integer, n_active;
            RETURN;
        END IF;
        new_status := 'waiting';
        n_active := n_waiting + 1;  -- answered as `counted`: the run's place in its user's queue
    ELSIF n_queued >= p_max_queued THEN
        RETURN QUERY SELECT 'quota_queued'::text, NULL::text, NULL::integer, n_queued;
        RETURN;
    END IF;
    INSERT INTO messages (task_id, idx, kind, payload, run_id)
        SELECT p_task, coalesce(max(m.idx) + 1, 0), 'chat', p_payload, p_run FROM messages m WHERE m.task_id = p_task
        RETURNING idx INTO new_idx;
    UPDATE tasks SET run_status = new_status, run_id = p_run, run_error = NULL, run_owner = NULL,
                     run_queued_at = now(), run_started_at = NULL, run_timings = NULL,
                     run_events_from = p_events_from,
                     run_request = CASE WHEN new_status = 'waiting' THEN p_request END, updated_at = now()
     WHERE task_id = p_task;
    RETURN QUERY SELECT new_status, NULL::text, new_idx, n_active;
END
$fn$;
"""

PROMOTE_WAITING_V1 = """
CREATE OR REPLACE FUNCTION zcbot_promote_waiting_v1(p_user text, p_max_active bigint)
RETURNS TABLE (task_id text, run_id text, run_request jsonb)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    n_active bigint;
BEGIN
    PERFORM 1 FROM users u WHERE u.user_id = p_user FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT count(*) INTO n_active FROM tasks t
     WHERE t.user_id = p_user AND t.run_status IN ('queued', 'running', 'cancelling');
    IF n_active >= p_max_active THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE tasks t SET run_status = 'queued', run_request = NULL, run_queued_at = now(), updated_at = now()
      FROM (SELECT w.task_id, w.run_request AS request FROM tasks w
             WHERE w.user_id = p_user AND w.run_status = 'waiting' AND w.deleted_at IS NULL
             ORDER BY w.run_queued_at, w.task_id LIMIT p_max_active - n_active FOR UPDATE) AS oldest
     WHERE t.task_id = oldest.task_id
    RETURNING t.task_id::text, t.run_id::text, oldest.request;
END
$fn$;
"""


def upgrade() -> None:
    op.add_column("tasks", sa.Column("run_request", JSONB, nullable=True))
    op.execute(SUBMIT_RUN_V2)
    op.execute(PROMOTE_WAITING_V1)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS zcbot_promote_waiting_v1(text, bigint)")
    op.execute("DROP FUNCTION IF EXISTS zcbot_submit_run_v2(text, text, text, jsonb, bigint, text, bigint, bigint, "
               "bigint, jsonb)")
    op.drop_column("tasks", "run_request")
