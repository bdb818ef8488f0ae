"""submit a message to an idle task in one round trip

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:20:00

`zcbot_submit_run_v1` does what the gateway's submit transaction does for a task with no active run
(lock the user row, then the task row; check both run caps; append the user message; queue the run),
as one call: one round trip instead of BEGIN, five statements and COMMIT. A PL/pgSQL function
because each of its statements takes a fresh snapshot (READ COMMITTED): the caps are counted after
the user row lock is held, so the per-user cap is exact, which one plain statement (a single
snapshot, taken before the lock wait) could not guarantee.

It writes nothing unless it answers `queued`; every other answer names why (`no_user`, `no_task`,
`wrong_channel` with the task's channel, `active` with the run status, `quota_active` with the
count, `quota_queued`). The caller handles `active` (enqueue/interrupt) with the transaction, which
stays the reference: tests/core/runstate/test_submit.py checks that both leave identical rows.
"""
from __future__ import annotations

from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

SUBMIT_RUN_V1 = """
CREATE OR REPLACE FUNCTION zcbot_submit_run_v1(
    p_user text, p_task text, p_run text, p_payload jsonb, p_events_from bigint, p_channel text,
    p_max_active bigint, p_max_queued bigint)
RETURNS TABLE (outcome text, detail text, message_idx integer, counted bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    task_channel text;
    task_status text;
    n_active bigint;
    n_queued bigint;
    new_idx integer;
BEGIN
    -- The user row first, then the task row: the order every writer locks in.
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
    IF task_status IN ('queued', 'running', 'cancelling') THEN
        RETURN QUERY SELECT 'active'::text, task_status, NULL::integer, NULL::bigint;
        RETURN;
    END IF;
    -- A new snapshot, taken with the user row held: concurrent submits of this user are counted.
    SELECT count(*) FILTER (WHERE t.user_id = p_user), count(*) FILTER (WHERE t.run_status = 'queued')
      INTO n_active, n_queued
      FROM tasks t WHERE t.run_status IN ('queued', 'running', 'cancelling');
    IF n_active >= p_max_active THEN
        RETURN QUERY SELECT 'quota_active'::text, NULL::text, NULL::integer, n_active;
        RETURN;
    END IF;
    IF n_queued >= p_max_queued THEN
        RETURN QUERY SELECT 'quota_queued'::text, NULL::text, NULL::integer, n_queued;
        RETURN;
    END IF;
    INSERT INTO messages (task_id, idx, kind, payload, run_id)
        SELECT p_task, coalesce(max(m.idx) + 1, 0), 'chat', p_payload, p_run FROM messages m WHERE m.task_id = p_task
        RETURNING idx INTO new_idx;
    UPDATE tasks SET run_status = 'queued', run_id = p_run, run_error = NULL, run_owner = NULL,
                     run_queued_at = now(), run_started_at = NULL, run_timings = NULL,
                     run_events_from = p_events_from, updated_at = now()
     WHERE task_id = p_task;
    RETURN QUERY SELECT 'queued'::text, NULL::text, new_idx, n_active;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(SUBMIT_RUN_V1)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS zcbot_submit_run_v1(text, text, text, jsonb, bigint, text, bigint, bigint)")
