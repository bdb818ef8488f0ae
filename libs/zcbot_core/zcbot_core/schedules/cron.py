"""Schedule time math: the next firing instant of a cron expression in a timezone, DST included, and local labels.

Next-fire semantics (`next_fire`): croniter in the job's local wall time (vixie cron: when both
day-of-month and day-of-week are restricted, either matching fires), then converted to UTC.
DST: a local time skipped by a spring-forward gap fires once, at the instant the gap ends
shifted by the same amount (02:30 on a New York spring-forward day -> 03:30 EDT); a local time
repeated by a fall-back fires once, at its first occurrence — except for jobs whose hour field is
`*`, which also fire in the repeated hour so "every N minutes" keeps holding in real time.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadCronError, CroniterBadDateError, CroniterError

from zcbot_core.db.models import ScheduledJob
from zcbot_core.safe_fs import paths
from zcbot_core.schedules.rules import MAX_JOB_NAME, ScheduleError, expand_alias

_DST_SLACK = timedelta(hours=3)  # larger than any DST shift in the tz database
_MAX_CANDIDATES = 5000


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown timezone {tz!r}") from None


def _instants(naive: datetime, zone: ZoneInfo, repeat_ambiguous: bool) -> list[datetime]:
    """UTC instants at which local wall time `naive` fires (see the module docstring for DST)."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    first_utc = first.astimezone(timezone.utc)
    out = [first_utc]
    exists = first_utc.astimezone(zone).replace(tzinfo=None) == naive
    if exists and repeat_ambiguous and first.utcoffset() != second.utcoffset():
        out.append(second.astimezone(timezone.utc))
    return out


def _near_transition(zone: ZoneInfo, instant: datetime) -> bool:
    return (instant - _DST_SLACK).astimezone(zone).utcoffset() != (instant + _DST_SLACK).astimezone(zone).utcoffset()


def next_fire(cron: str, tz: str, after: datetime) -> datetime:
    """The first instant strictly after `after` (aware) at which the job fires, in UTC."""
    if after.tzinfo is None:
        raise ValueError("next_fire needs an aware datetime")
    expr = expand_alias(cron)
    zone = _zone(tz)
    after_utc = after.astimezone(timezone.utc)
    repeat_ambiguous = expr.split(" ")[1] == "*" if len(expr.split(" ")) == 5 else False
    local_after = after_utc.astimezone(zone).replace(tzinfo=None)
    start = local_after - _DST_SLACK if _near_transition(zone, after_utc) else local_after
    try:
        it = croniter(expr, start, day_or=True)
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError(f"invalid cron expression {cron!r}") from exc
    best: datetime | None = None
    for _ in range(_MAX_CANDIDATES):
        try:
            naive = it.get_next(datetime)
        except (CroniterBadDateError, CroniterError) as exc:
            if best is not None:
                break
            raise ScheduleError(f"cron {cron!r} never fires") from exc
        candidates = _instants(naive, zone, repeat_ambiguous)
        if best is not None:
            horizon = best + (_DST_SLACK if _near_transition(zone, best) else timedelta(0))
            if candidates[0] > horizon:
                break
        for inst in candidates:
            if inst > after_utc and (best is None or inst < best):
                best = inst
    if best is None:
        raise ScheduleError(f"cron {cron!r} has no fire time soon enough")
    return best


def local_label(instant: datetime, tz: str) -> str:
    """`YYYY-MM-DD HH:MM` in the job's timezone (task names, summaries)."""
    return instant.astimezone(_zone(tz)).strftime("%Y-%m-%d %H:%M")


def firing_task_name(job_name: str, instant: datetime, tz: str) -> str:
    return paths.validate_task_name(f"{job_name[:MAX_JOB_NAME]} {local_label(instant, tz)}")


def firing_prompt(job: ScheduledJob, instant: datetime) -> str:
    """The user message of a firing: a marker line (so the agent knows nobody is watching), then the prompt."""
    return (f"[scheduled job \"{job.name}\" ({job.cron}, {job.timezone}) fired at "
            f"{local_label(instant, job.timezone)}]\n{job.prompt}")
