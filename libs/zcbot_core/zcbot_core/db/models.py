"""Tables of DESIGN §6 / seed 003 §7.4. Paths are stored relative and normalized (see `paths`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


class User(Base):
    __tablename__ = "users"

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(128))
    oidc_subject: Mapped[str | None] = mapped_column(String(256))
    plan: Mapped[str | None] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(256))
    user_name: Mapped[str | None] = mapped_column(String(256))
    role: Mapped[str] = mapped_column(String(32), server_default="user", default="user")
    # Tokens carry the version they were issued under; a password or role change bumps it (a trigger,
    # migration 0004), which revokes every older token.
    token_version: Mapped[int] = mapped_column(BigInteger, server_default=text(
        "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Cost budgets in USD (migration 0007): null = the service default, 0 = no limit (zcbot_core.accounts.budgets).
    budget_daily_usd: Mapped[Decimal | None] = mapped_column(Numeric(14, 6), nullable=True)
    budget_monthly_usd: Mapped[Decimal | None] = mapped_column(Numeric(14, 6), nullable=True)


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_user_created", "user_id", "created_at"),
        Index("ix_tasks_run_status", "run_status"),
    )

    task_id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.user_id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    working_dir: Mapped[str] = mapped_column(String(1024))
    skill: Mapped[str | None] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32), server_default="active", default="active")
    model_profile: Mapped[str | None] = mapped_column(String(128))
    tokens_in: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    tokens_out: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    tokens_cached: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    cost_usd: Mapped[Decimal] = mapped_column(Numeric(14, 6), server_default="0", default=Decimal(0))
    channel: Mapped[str] = mapped_column(String(32), server_default="web", default="web")
    run_status: Mapped[str] = mapped_column(String(16), server_default="idle", default="idle")
    run_error: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(32))
    run_owner: Mapped[str | None] = mapped_column(String(128))
    run_queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    run_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    run_timings: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # First events-stream sequence that can belong to the current run (SSE replay starts here).
    run_events_from: Mapped[int | None] = mapped_column(BigInteger)
    # Messages queued behind the active run by the `enqueue` multitask strategy (oldest first).
    pending_inputs: Mapped[list[Any]] = mapped_column(JSONB, server_default="[]", default=list)
    # A `waiting` run's request (origin, scheduled job, grant) until it starts (migration 0005).
    run_request: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    scheduled_job_id: Mapped[str | None] = mapped_column(String(32), index=True)
    context_base_idx: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    context_summary: Mapped[str | None] = mapped_column(Text)
    # The task's own wall-clock backstop in seconds (None: ZCBOT_RUN_WALL_CLOCK_SECONDS).
    wall_clock_seconds: Mapped[int | None] = mapped_column(Integer)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("task_id", "idx", name="uq_messages_task_idx"),
        Index("ix_messages_payload_gin", "payload", postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.task_id", ondelete="CASCADE"))
    idx: Mapped[int] = mapped_column(Integer)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    tokens_in: Mapped[int | None] = mapped_column(Integer)
    tokens_out: Mapped[int | None] = mapped_column(Integer)
    model_profile: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32), server_default="chat", default="chat")
    run_id: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class BudgetReservation(Base):
    """One LLM call's worst-case cost, held from before the call until its usage event is written."""

    __tablename__ = "budget_reservations"
    __table_args__ = (Index("ix_budget_reservations_user", "user_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.user_id", ondelete="CASCADE"))
    run_id: Mapped[str | None] = mapped_column(String(64))
    amount: Mapped[Decimal] = mapped_column(Numeric(14, 6))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class UsageEvent(Base):
    __tablename__ = "usage_events"
    __table_args__ = (Index("ix_usage_user_created", "user_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(128))
    task_id: Mapped[str | None] = mapped_column(String(32), index=True)
    message_id: Mapped[int | None] = mapped_column(BigInteger)
    run_id: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32), server_default="chat", default="chat")
    model_profile: Mapped[str | None] = mapped_column(String(128))
    units: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    cost: Mapped[Decimal] = mapped_column(Numeric(14, 6), server_default="0", default=Decimal(0))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class DataEvent(Base):
    """One file mutation in a user root (issue 29): written only by `zcbot_core.filehistory.record`.
    `prev_hash` names the kept version of what the change replaced or removed (the version store)."""

    __tablename__ = "data_events"
    __table_args__ = (Index("ix_data_events_user_path", "user_id", "path", "id"),
                      Index("ix_data_events_run", "run_id", "id"),
                      Index("ix_data_events_undoes", "undoes_run_id", "id",
                            postgresql_where=text("undoes_run_id IS NOT NULL")),
                      Index("ix_data_events_created", "created_at"))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(128))
    task_id: Mapped[str | None] = mapped_column(String(32))
    run_id: Mapped[str | None] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    size: Mapped[int | None] = mapped_column(BigInteger)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    old_path: Mapped[str | None] = mapped_column(Text)  # a rename: where it was (the history follows it)
    # a revert's rows: the run they undid, set only when nothing was left to undo (the history says "undone")
    undoes_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class FileReportRecorded(Base):
    """A background file-changes report whose `data_events` rows are written (issue 29): inserted in
    the same transaction as them, so a redelivered report finds its key and writes nothing."""

    __tablename__ = "file_reports_recorded"
    __table_args__ = (Index("ix_file_reports_recorded_created", "created_at"),)

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    report_id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the executor's proc id
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ScheduledJob(Base):
    __tablename__ = "scheduled_jobs"
    __table_args__ = (Index("ix_jobs_due", "enabled", "next_run_at"),)

    job_id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.user_id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    cron: Mapped[str] = mapped_column(String(128))
    timezone: Mapped[str] = mapped_column(String(64), server_default="UTC", default="UTC")
    prompt: Mapped[str] = mapped_column(Text)
    mode: Mapped[str] = mapped_column(String(16), server_default="isolated", default="isolated")
    task_id: Mapped[str | None] = mapped_column(String(32))
    working_dir: Mapped[str] = mapped_column(String(1024))
    notify: Mapped[str | None] = mapped_column(String(32))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default="true", default=True)
    next_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_run_id: Mapped[str | None] = mapped_column(String(32))
    last_task_id: Mapped[str | None] = mapped_column(String(32))
    last_status: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    consecutive_failures: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    timeout_seconds: Mapped[int] = mapped_column(Integer, server_default="1800", default=1800)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Scheduler bookkeeping (migration 0002): a non-null deadline means a run is in flight.
    run_deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    notified_run_id: Mapped[str | None] = mapped_column(String(32))


class ChannelBinding(Base):
    __tablename__ = "channel_bindings"
    __table_args__ = (UniqueConstraint("user_id", "channel", name="uq_binding_user_channel"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.user_id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), server_default="active", default="active")
    # Non-secret settings in the clear; secrets as AES-GCM ciphertext under `secrets`.
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class EgressUsage(Base):
    """Bytes a user moved through the sandboxes' egress proxy, per hour (issue 40): every executor
    host adds its own, so the per-user cap (ZCBOT_USER_EGRESS_MB_PER_DAY) holds across hosts and
    restarts. Written only by `zcbot_core.egress_usage`."""

    __tablename__ = "egress_usage"

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # epoch seconds // 3600 (UTC)
    bytes: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
