"""Scheduler configuration: `SchedulerSettings` (the core `Settings` plus the scheduler's knobs,
validated at start-up; the README's table is generated from it) and `SchedulerConfig`, the frozen
view the scheduler's parts read, built only from the settings (each default is declared once, on the
pydantic field; tests override fields with `from_settings(settings, tick_seconds=0, ...)`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from zcbot_core.platform.config import Settings, load_settings


class SchedulerSettings(Settings):
    """The scheduler's environment; an empty variable means "the default"."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True)

    zcbot_schedule_max_failures: int = Field(default=3, ge=1, alias="ZCBOT_SCHEDULE_MAX_FAILURES",
                                             description="consecutive failed runs that disable a job")
    zcbot_scheduler_tick_seconds: float = Field(default=1.0, alias="ZCBOT_SCHEDULER_TICK_SECONDS", description=(
        "how often due jobs are claimed (<= 0: no loop; tests call `tick()` themselves)"))
    zcbot_schedule_misfire_grace_seconds: float = Field(
        default=60.0, ge=0, alias="ZCBOT_SCHEDULE_MISFIRE_GRACE_SECONDS",
        description="a due time older than this is missed, not run late (no catch-up after downtime)")
    zcbot_schedule_cancel_grace_seconds: float = Field(
        default=60.0, ge=0, alias="ZCBOT_SCHEDULE_CANCEL_GRACE_SECONDS",
        description="after a timeout cancel, how long to wait for the run to stop before recording the timeout anyway")
    zcbot_schedule_reconcile_grace_seconds: float = Field(
        default=5.0, ge=0, alias="ZCBOT_SCHEDULE_RECONCILE_GRACE_SECONDS",
        description="a run whose task went idle this long ago without its `done` event seen is reconciled from the DB")
    zcbot_schedule_push_timeout_seconds: float = Field(
        default=10.0, ge=0.1, alias="ZCBOT_SCHEDULE_PUSH_TIMEOUT_SECONDS",
        description="request timeout of a push to the channels service")
    zcbot_scheduler_batch: int = Field(default=50, ge=1, alias="ZCBOT_SCHEDULER_BATCH",
                                       description="most jobs fired per tick by one replica")
    zcbot_requeue_after_seconds: float = Field(default=60.0, gt=0, alias="ZCBOT_REQUEUE_AFTER_SECONDS",
        description='a run `queued` in PostgreSQL this long whose request is not in the runs stream is '
                    'published again (the scheduler\'s sweep)')


@dataclass(frozen=True)
class SchedulerConfig:
    max_failures: int
    tick_seconds: float
    misfire_grace_seconds: float
    cancel_grace_seconds: float
    reconcile_grace_seconds: float
    push_timeout_seconds: float
    batch: int
    requeue_after_seconds: float

    @classmethod
    def from_settings(cls, s: SchedulerSettings, **overrides: Any) -> "SchedulerConfig":
        config = cls(
            max_failures=s.zcbot_schedule_max_failures,
            tick_seconds=s.zcbot_scheduler_tick_seconds,
            misfire_grace_seconds=s.zcbot_schedule_misfire_grace_seconds,
            cancel_grace_seconds=s.zcbot_schedule_cancel_grace_seconds,
            reconcile_grace_seconds=s.zcbot_schedule_reconcile_grace_seconds,
            push_timeout_seconds=s.zcbot_schedule_push_timeout_seconds,
            batch=s.zcbot_scheduler_batch,
            requeue_after_seconds=s.zcbot_requeue_after_seconds,
        )
        return replace(config, **overrides) if overrides else config

    @classmethod
    def defaults(cls, **overrides: Any) -> "SchedulerConfig":
        """The declared defaults (no environment read), with `overrides`: for tests and tools."""
        return cls.from_settings(SchedulerSettings.model_construct(), **overrides)

    @classmethod
    def from_env(cls) -> "SchedulerConfig":
        """Read and validate the environment now (a bad knob is a `ConfigError` naming it)."""
        return cls.from_settings(load_settings(SchedulerSettings))
