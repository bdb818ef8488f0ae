"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 22:12:43.021640
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    
    op.create_table('usage_events',
    sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('user_id', sa.String(length=128), nullable=False),
    sa.Column('task_id', sa.String(length=32), nullable=True),
    sa.Column('message_id', sa.BigInteger(), nullable=True),
    sa.Column('run_id', sa.String(length=32), nullable=True),
    sa.Column('kind', sa.String(length=32), server_default='chat', nullable=False),
    sa.Column('model_profile', sa.String(length=128), nullable=True),
    sa.Column('units', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('cost', sa.Numeric(precision=14, scale=6), server_default='0', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_usage_events_task_id'), 'usage_events', ['task_id'], unique=False)
    op.create_index('ix_usage_user_created', 'usage_events', ['user_id', 'created_at'], unique=False)
    op.create_table('users',
    sa.Column('user_id', sa.String(length=128), nullable=False),
    sa.Column('email', sa.String(length=320), nullable=True),
    sa.Column('password_hash', sa.String(length=128), nullable=True),
    sa.Column('oidc_subject', sa.String(length=256), nullable=True),
    sa.Column('plan', sa.String(length=64), nullable=True),
    sa.Column('name', sa.String(length=256), nullable=True),
    sa.Column('user_name', sa.String(length=256), nullable=True),
    sa.Column('role', sa.String(length=32), server_default='user', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('user_id'),
    sa.UniqueConstraint('email')
    )
    op.create_table('channel_bindings',
    sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('user_id', sa.String(length=128), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), server_default='active', nullable=False),
    sa.Column('config', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.user_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('user_id', 'channel', name='uq_binding_user_channel')
    )
    op.create_index(op.f('ix_channel_bindings_user_id'), 'channel_bindings', ['user_id'], unique=False)
    op.create_table('scheduled_jobs',
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('user_id', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('cron', sa.String(length=128), nullable=False),
    sa.Column('timezone', sa.String(length=64), server_default='UTC', nullable=False),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('mode', sa.String(length=16), server_default='isolated', nullable=False),
    sa.Column('task_id', sa.String(length=32), nullable=True),
    sa.Column('working_dir', sa.String(length=1024), nullable=False),
    sa.Column('notify', sa.String(length=32), nullable=True),
    sa.Column('enabled', sa.Boolean(), server_default='true', nullable=False),
    sa.Column('next_run_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_run_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_run_id', sa.String(length=32), nullable=True),
    sa.Column('last_task_id', sa.String(length=32), nullable=True),
    sa.Column('last_status', sa.String(length=16), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('consecutive_failures', sa.Integer(), server_default='0', nullable=False),
    sa.Column('timeout_seconds', sa.Integer(), server_default='1800', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.user_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id')
    )
    op.create_index('ix_jobs_due', 'scheduled_jobs', ['enabled', 'next_run_at'], unique=False)
    op.create_index(op.f('ix_scheduled_jobs_user_id'), 'scheduled_jobs', ['user_id'], unique=False)
    op.create_table('tasks',
    sa.Column('task_id', sa.String(length=32), nullable=False),
    sa.Column('user_id', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('working_dir', sa.String(length=1024), nullable=False),
    sa.Column('skill', sa.String(length=128), nullable=True),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('status', sa.String(length=32), server_default='active', nullable=False),
    sa.Column('model_profile', sa.String(length=128), nullable=True),
    sa.Column('tokens_in', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('tokens_out', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('tokens_cached', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('cost_usd', sa.Numeric(precision=14, scale=6), server_default='0', nullable=False),
    sa.Column('channel', sa.String(length=32), server_default='web', nullable=False),
    sa.Column('run_status', sa.String(length=16), server_default='idle', nullable=False),
    sa.Column('run_error', sa.Text(), nullable=True),
    sa.Column('run_id', sa.String(length=32), nullable=True),
    sa.Column('run_owner', sa.String(length=128), nullable=True),
    sa.Column('run_queued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('run_started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('run_timings', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('run_events_from', sa.BigInteger(), nullable=True),
    sa.Column('pending_inputs', postgresql.JSONB(astext_type=sa.Text()), server_default='[]', nullable=False),
    sa.Column('scheduled_job_id', sa.String(length=32), nullable=True),
    sa.Column('context_base_idx', sa.Integer(), server_default='0', nullable=False),
    sa.Column('context_summary', sa.Text(), nullable=True),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.user_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('task_id')
    )
    op.create_index('ix_tasks_run_status', 'tasks', ['run_status'], unique=False)
    op.create_index(op.f('ix_tasks_scheduled_job_id'), 'tasks', ['scheduled_job_id'], unique=False)
    op.create_index('ix_tasks_user_created', 'tasks', ['user_id', 'created_at'], unique=False)
    op.create_index(op.f('ix_tasks_user_id'), 'tasks', ['user_id'], unique=False)
    op.create_table('messages',
    sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('task_id', sa.String(length=32), nullable=False),
    sa.Column('idx', sa.Integer(), nullable=False),
    sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('tokens_in', sa.Integer(), nullable=True),
    sa.Column('tokens_out', sa.Integer(), nullable=True),
    sa.Column('model_profile', sa.String(length=128), nullable=True),
    sa.Column('kind', sa.String(length=32), server_default='chat', nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.task_id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('task_id', 'idx', name='uq_messages_task_idx')
    )
    op.create_index('ix_messages_payload_gin', 'messages', ['payload'], unique=False, postgresql_using='gin')
    


def downgrade() -> None:
    
    op.drop_index('ix_messages_payload_gin', table_name='messages', postgresql_using='gin')
    op.drop_table('messages')
    op.drop_index(op.f('ix_tasks_user_id'), table_name='tasks')
    op.drop_index('ix_tasks_user_created', table_name='tasks')
    op.drop_index(op.f('ix_tasks_scheduled_job_id'), table_name='tasks')
    op.drop_index('ix_tasks_run_status', table_name='tasks')
    op.drop_table('tasks')
    op.drop_index(op.f('ix_scheduled_jobs_user_id'), table_name='scheduled_jobs')
    op.drop_index('ix_jobs_due', table_name='scheduled_jobs')
    op.drop_table('scheduled_jobs')
    op.drop_index(op.f('ix_channel_bindings_user_id'), table_name='channel_bindings')
    op.drop_table('channel_bindings')
    op.drop_table('users')
    op.drop_index('ix_usage_user_created', table_name='usage_events')
    op.drop_index(op.f('ix_usage_events_task_id'), table_name='usage_events')
    op.drop_table('usage_events')
    
