"""Schedule input rules: limits, the error types and one validator per field (the caller's fault -> 400 / a tool error)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from zcbot_core.errors import ZcbotError
from zcbot_core.safe_fs import paths
from zcbot_core.workspace.folders import normalize_working_dir, simple_working_dir

MODES = ("isolated", "persistent")
DEFAULT_TIMEOUT_SECONDS = 1800
# A job created without a timezone, unless its creator passes its own default (the runner passes
# `ZCBOT_SCHEDULE_DEFAULT_TIMEZONE`).
DEFAULT_TIMEZONE = "UTC"
MIN_TIMEOUT_SECONDS = 30
MAX_TIMEOUT_SECONDS = 24 * 3600
MAX_JOB_NAME = 120  # leaves room for the " YYYY-MM-DD HH:MM" suffix of a firing's task name
MAX_PROMPT_CHARS = 20_000
MAX_JOBS_PER_USER = 50
NOTIFY_ALL = "all"
_NOTIFY = re.compile(r"^[a-z0-9_-]{1,32}$")
_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}


class ScheduleError(ZcbotError, ValueError):
    """Invalid schedule input (the caller's fault: 400 / a tool error)."""

    code = "schedule_invalid"
    http_status = 400


class ScheduleNotFound(ZcbotError, LookupError):
    """No such job for this user (404)."""

    code = "schedule_not_found"
    http_status = 404
    public_detail = "scheduled job not found"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def validate_timezone(tz: Any) -> str:
    if not isinstance(tz, str) or not tz.strip():
        raise ScheduleError("timezone must be an IANA name such as 'Asia/Shanghai' or 'UTC'")
    name = tz.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'") from None
    return name


def validate_cron(cron: Any) -> str:
    """A 5-field cron expression (or @daily-style alias), normalized; it must fire at least once."""
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleError("cron must be a 5-field expression such as '0 9 * * *' (minute hour day month weekday)")
    expr = " ".join(cron.split())
    if expr.startswith("@"):
        if expr.lower() not in _ALIASES:
            raise ScheduleError(f"unsupported cron alias {expr!r}; use one of {', '.join(sorted(_ALIASES))}")
        return expr.lower()
    if len(expr.split(" ")) != 5:
        raise ScheduleError(f"cron {expr!r} must have exactly 5 fields: minute hour day-of-month month day-of-week")
    if len(expr) > 128 or not croniter.is_valid(expr):
        raise ScheduleError(f"invalid cron expression {expr!r}")
    try:
        croniter(expr, datetime(2000, 1, 1), day_or=True).get_next(datetime)
    except (CroniterBadDateError, CroniterError):
        raise ScheduleError(f"cron {expr!r} never fires") from None
    return expr


def validate_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ScheduleError(f"mode must be one of {', '.join(MODES)}")
    return str(mode)


def validate_notify(notify: Any) -> str | None:
    if notify is None:
        return None
    if not isinstance(notify, str):
        raise ScheduleError("notify must be a channel name, 'all', or null")
    value = notify.strip().lower()
    if value in ("", "none", "off"):
        return None
    if not _NOTIFY.match(value):
        raise ScheduleError("notify must be a channel name (letters, digits, '_' or '-'), 'all', or null")
    return value


def validate_name(name: Any) -> str:
    try:
        clean = paths.validate_task_name(name, "name")
    except paths.PathRejected as exc:
        raise ScheduleError(str(exc)) from None
    if len(clean) > MAX_JOB_NAME:
        raise ScheduleError(f"name must be at most {MAX_JOB_NAME} characters")
    return clean


def validate_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ScheduleError("prompt must be a non-empty instruction for the agent")
    if "\x00" in prompt:
        raise ScheduleError("prompt must not contain NUL")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ScheduleError(f"prompt must be at most {MAX_PROMPT_CHARS} characters")
    return prompt.strip()


def validate_timeout(value: Any) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ScheduleError("timeout_seconds must be a whole number of seconds")
    seconds = int(value)
    if not MIN_TIMEOUT_SECONDS <= seconds <= MAX_TIMEOUT_SECONDS:
        raise ScheduleError(f"timeout_seconds must be between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS}")
    return seconds


def validate_working_dir(raw: Any, *, existing: bool = False) -> str:
    """A job's folder: a simple name when new; `existing`: it names a task's folder as stored (maybe
    nested, from before the simple-name rule)."""
    if not isinstance(raw, str):
        raise ScheduleError("working_dir must be a folder name")
    try:
        return normalize_working_dir(raw) if existing else simple_working_dir(raw)
    except paths.PathRejected as exc:
        message = str(exc)
        raise ScheduleError(message if message.startswith(("working_dir", "folder names")) else f"working_dir: {message}") from None


# ---- time ------------------------------------------------------------------------------------



def expand_alias(cron: str) -> str:
    return _ALIASES.get(cron.lower(), cron)
