"""Scheduler knobs from the environment (kept out of `zcbot_core.config`: the scheduler owns them).

  ZCBOT_SCHEDULE_MAX_FAILURES           consecutive failed runs that disable a job (default 3)
  ZCBOT_SCHEDULER_TICK_SECONDS          how often due jobs are claimed (default 1; <= 0: no loop,
                                        tests call `tick()` themselves)
  ZCBOT_SCHEDULE_MISFIRE_GRACE_SECONDS  a due time older than this is missed, not run late (no
                                        catch-up after downtime; default 60)
  ZCBOT_SCHEDULE_CANCEL_GRACE_SECONDS   after a timeout cancel, how long to wait for the run to
                                        stop before recording the timeout anyway (default 60)
  ZCBOT_SCHEDULE_RECONCILE_GRACE_SECONDS  a run whose task went idle this long ago without its
                                        `done` event being seen is reconciled from the DB (default 5)
  ZCBOT_SCHEDULE_PUSH_TIMEOUT_SECONDS   request timeout of a push to the channels service (default 10)
  ZCBOT_SCHEDULER_BATCH                 most jobs fired per tick by one replica (default 50)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from zcbot_core.config import ConfigError


def _num(env: Mapping[str, str], name: str, default: float, *, minimum: float | None = None) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {raw!r}")
    return value


@dataclass(frozen=True)
class SchedulerConfig:
    max_failures: int = 3
    tick_seconds: float = 1.0
    misfire_grace_seconds: float = 60.0
    cancel_grace_seconds: float = 60.0
    reconcile_grace_seconds: float = 5.0
    push_timeout_seconds: float = 10.0
    batch: int = 50

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "SchedulerConfig":
        env = os.environ if env is None else env
        return cls(
            max_failures=int(_num(env, "ZCBOT_SCHEDULE_MAX_FAILURES", 3, minimum=1)),
            tick_seconds=_num(env, "ZCBOT_SCHEDULER_TICK_SECONDS", 1.0),
            misfire_grace_seconds=_num(env, "ZCBOT_SCHEDULE_MISFIRE_GRACE_SECONDS", 60.0, minimum=0),
            cancel_grace_seconds=_num(env, "ZCBOT_SCHEDULE_CANCEL_GRACE_SECONDS", 60.0, minimum=0),
            reconcile_grace_seconds=_num(env, "ZCBOT_SCHEDULE_RECONCILE_GRACE_SECONDS", 5.0, minimum=0),
            push_timeout_seconds=_num(env, "ZCBOT_SCHEDULE_PUSH_TIMEOUT_SECONDS", 10.0, minimum=0.1),
            batch=int(_num(env, "ZCBOT_SCHEDULER_BATCH", 50, minimum=1)),
        )
