"""Scheduled jobs: the one service layer behind REST, the `schedule_*` host tools and the scheduler.

Seed 003 §8.5. A job is cron + IANA timezone + one prompt + a conversation mode; the scheduler only
feeds the (marked) prompt into the normal run pipeline at the due instants.

- `mode`: `isolated` (default; a new task per firing, tagged with `scheduled_job_id`) or
  `persistent` (the bound task `task_id` continues its conversation). The folder (`working_dir`)
  is reused by every firing in both modes; for `persistent` it is the bound task's folder.
- `notify`: None (results only land in the task), a channel name, or `all` (every active channel):
  the scheduler then pushes a summary deterministically after each run.
- Every query is scoped by `user_id`; another user's job looks exactly like a missing one.
- Callers own the transaction: functions flush, never commit.

Modules: `rules` (limits, errors, one validator per field), `cron` (next firing instant, DST, labels),
`store` (the PostgreSQL operations). This package re-exports them so callers say `schedules.next_fire`.
"""

from zcbot_core.schedules.cron import firing_prompt, firing_task_name, local_label, next_fire
from zcbot_core.schedules.rules import (
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_TIMEZONE,
    MAX_JOB_NAME,
    MAX_JOBS_PER_USER,
    MAX_PROMPT_CHARS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    MODES,
    NOTIFY_ALL,
    ScheduleError,
    ScheduleNotFound,
    utcnow,
    validate_cron,
    validate_mode,
    validate_name,
    validate_notify,
    validate_prompt,
    validate_timeout,
    validate_timezone,
    validate_working_dir,
)
from zcbot_core.schedules.store import (
    create_schedule,
    delete_schedule,
    disable_schedule,
    get_schedule,
    job_to_dict,
    list_schedules,
    update_schedule,
)

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_TIMEZONE", "MAX_JOB_NAME", "MAX_JOBS_PER_USER", "MAX_PROMPT_CHARS", "MAX_TIMEOUT_SECONDS",
    "MIN_TIMEOUT_SECONDS", "MODES", "NOTIFY_ALL", "ScheduleError", "ScheduleNotFound", "create_schedule",
    "delete_schedule", "disable_schedule", "firing_prompt", "firing_task_name", "get_schedule",
    "job_to_dict", "list_schedules", "local_label", "next_fire", "update_schedule", "utcnow", "validate_cron",
    "validate_mode", "validate_name", "validate_notify", "validate_prompt", "validate_timeout", "validate_timezone",
    "validate_working_dir",
]
