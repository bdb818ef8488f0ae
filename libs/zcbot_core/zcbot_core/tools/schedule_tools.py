"""Host tools `schedule_create`, `schedule_list`, `schedule_update`, `schedule_delete` (seed 003 §8.5).

The conversation is the full CRUD surface for scheduled jobs (the web UI only lists, disables and
deletes), so the model says "every day at 9" as `cron="0 9 * * *"` plus an IANA timezone. All
validation lives in `zcbot_core.schedules`, shared with REST and the scheduler.

Inside a scheduled run (`in_scheduled_run`, or the task carries `scheduled_job_id`) the tools are
still offered, but every call except `schedule_list` fails with a clear tool error: a job must not
create or change jobs (no self-multiplication).

Wiring (runner): `register_schedule_tools(toolbox, sessions, user_id, task, in_scheduled_run,
default_timezone=...)` (the runner's `ZCBOT_SCHEDULE_DEFAULT_TIMEZONE`), with
`in_scheduled_run = bool(task.scheduled_job_id) or req.origin == "scheduler"` (a persistent job's
bound task has no `scheduled_job_id`, only its run requests are marked).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import schedules
from zcbot_core.tools.results import ToolOutcome

SCHEDULED_RUN_REFUSAL = (
    "{name} is not allowed inside a scheduled run: a scheduled job cannot create, change or delete "
    "scheduled jobs. Tell the user what you would change so they can do it in a normal conversation."
)

_TIMING_HELP = ("5-field cron: minute hour day-of-month month day-of-week, e.g. '0 9 * * *' = every day 09:00, "
                "'30 8 * * 1-5' = weekdays 08:30, '0 */2 * * *' = every 2 hours. When both day fields are "
                "restricted, either one matching fires (vixie cron).")

_JOB_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "description": "Short name of the job (also names each run's task)."},
    "cron": {"type": "string", "description": _TIMING_HELP},
    "timezone": {"type": "string", "description": "IANA timezone the cron is read in, e.g. 'Asia/Shanghai', "
                 "'Europe/Berlin'. Ask the user if unsure."},
    "prompt": {"type": "string", "description": "The instruction each run receives, self-contained (the run has "
               "no memory of this conversation unless mode is persistent). Say here if the result should be "
               "pushed or saved somewhere."},
    "mode": {"type": "string", "enum": list(schedules.MODES), "description": "isolated (default): a fresh task "
             "per run, cheap. persistent: every run continues THIS conversation (context grows daily); only "
             "when the user wants continuity."},
    "working_dir": {"type": "string", "description": "Folder (relative to the user's root) the runs work in; "
                    "defaults to this task's folder. Persistent jobs always use this task's folder."},
    "notify": {"type": "string", "description": "Push a summary after every run: a channel name (e.g. "
               "'wecom' or 'ilink'), 'all' for every connected channel, or 'none' (results always stay in the "
               "run's task)."},
    "timeout_seconds": {"type": "integer", "description": f"Per-run time limit (default "
                        f"{schedules.DEFAULT_TIMEOUT_SECONDS}); a run hitting it is cancelled and counts as a "
                        "failure."},
}


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


SCHEDULE_CREATE = _fn(
    "schedule_create",
    "Create a scheduled job: at each cron time the prompt is run as a new message by the agent. "
    "Results land in the run's task; set notify to also push a summary to the user's channels.",
    dict(_JOB_FIELDS), ["name", "cron", "prompt", "timezone"],
)
SCHEDULE_LIST = _fn("schedule_list", "List the user's scheduled jobs with their next and last runs.", {}, [])
SCHEDULE_UPDATE = _fn(
    "schedule_update",
    "Change fields of a scheduled job (only the given ones). enabled=false pauses it; enabled=true resumes it "
    "and resets its failure count.",
    {"job_id": {"type": "string", "description": "The job to change (from schedule_list)."},
     **{k: v for k, v in _JOB_FIELDS.items()},
     "enabled": {"type": "boolean", "description": "Pause (false) or resume (true) the job."}},
    ["job_id"],
)
SCHEDULE_DELETE = _fn(
    "schedule_delete", "Delete a scheduled job for good (tasks of past runs are kept).",
    {"job_id": {"type": "string", "description": "The job to delete (from schedule_list)."}}, ["job_id"],
)
SCHEDULE_TOOL_SCHEMAS = [SCHEDULE_CREATE, SCHEDULE_LIST, SCHEDULE_UPDATE, SCHEDULE_DELETE]


@dataclass
class ScheduleHostTool:
    """Structurally the runner's `HostTool` (schema + async handler(args) -> ToolOutcome)."""

    schema: dict[str, Any]
    handler: Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


class ScheduleTools:
    """Handlers bound to one run: the user, the run's task (defaults) and whether the run is scheduled."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], user_id: str, task: Any, in_scheduled_run: bool,
                 clock: Callable[[], datetime] = schedules.utcnow,
                 default_timezone: str = schedules.DEFAULT_TIMEZONE) -> None:
        self.sessions = sessions
        self.default_timezone = default_timezone  # of a job created without one
        self.user_id = user_id
        self.task = task
        self.in_scheduled_run = bool(in_scheduled_run) or bool(getattr(task, "scheduled_job_id", None))
        self.clock = clock

    def _refused(self, name: str) -> ToolOutcome | None:
        if self.in_scheduled_run:
            return ToolOutcome.failure(SCHEDULED_RUN_REFUSAL.format(name=name))
        return None

    async def create(self, args: dict[str, Any]) -> ToolOutcome:
        if (refused := self._refused("schedule_create")) is not None:
            return refused
        fields = {k: args.get(k) for k in _JOB_FIELDS if args.get(k) is not None}
        mode = fields.get("mode", "isolated")
        task_id = getattr(self.task, "task_id", None)
        if mode == "persistent":
            fields["task_id"] = task_id
        elif "working_dir" not in fields and getattr(self.task, "working_dir", None):
            fields["working_dir"] = self.task.working_dir
        if "name" not in fields or "cron" not in fields or "prompt" not in fields:
            return ToolOutcome.failure("schedule_create needs name, cron, prompt (and timezone)")
        try:
            async with self.sessions() as session, session.begin():
                job = await schedules.create_schedule(session, user_id=self.user_id, now=self.clock(),
                                                     default_timezone=self.default_timezone, **fields)
                data = schedules.job_to_dict(job)
        except schedules.ScheduleError as exc:
            return ToolOutcome.failure(str(exc))
        return ToolOutcome.make(True, f"Created scheduled job {data['job_id']}; next run {data['next_run_local']} "
                                      f"({data['timezone']}).\n{_dump(data)}")

    async def list(self, args: dict[str, Any]) -> ToolOutcome:
        async with self.sessions() as session:
            jobs = [schedules.job_to_dict(j) for j in await schedules.list_schedules(session, self.user_id)]
        if not jobs:
            return ToolOutcome.make(True, "No scheduled jobs.")
        return ToolOutcome.make(True, _dump(jobs))

    async def update(self, args: dict[str, Any]) -> ToolOutcome:
        if (refused := self._refused("schedule_update")) is not None:
            return refused
        job_id = args.get("job_id")
        changes = {k: v for k, v in args.items() if k != "job_id"}
        if changes.get("mode") == "persistent":
            changes.setdefault("task_id", getattr(self.task, "task_id", None))
        if not changes:
            return ToolOutcome.failure("schedule_update needs at least one field to change")
        try:
            async with self.sessions() as session, session.begin():
                job = await schedules.update_schedule(session, self.user_id, job_id, changes, now=self.clock())
                data = schedules.job_to_dict(job)
        except (schedules.ScheduleError, schedules.ScheduleNotFound) as exc:
            return ToolOutcome.failure(str(exc) if isinstance(exc, schedules.ScheduleError)
                                       else f"no scheduled job {job_id!r}; call schedule_list")
        state = f"next run {data['next_run_local']} ({data['timezone']})" if data["enabled"] else "paused"
        return ToolOutcome.make(True, f"Updated scheduled job {data['job_id']}; {state}.\n{_dump(data)}")

    async def delete(self, args: dict[str, Any]) -> ToolOutcome:
        if (refused := self._refused("schedule_delete")) is not None:
            return refused
        job_id = args.get("job_id")
        try:
            async with self.sessions() as session, session.begin():
                await schedules.delete_schedule(session, self.user_id, job_id)
        except schedules.ScheduleNotFound:
            return ToolOutcome.failure(f"no scheduled job {job_id!r}; call schedule_list")
        return ToolOutcome.make(True, f"Deleted scheduled job {job_id}.")

    def host_tools(self) -> list[ScheduleHostTool]:
        return [ScheduleHostTool(SCHEDULE_CREATE, self.create), ScheduleHostTool(SCHEDULE_LIST, self.list),
                ScheduleHostTool(SCHEDULE_UPDATE, self.update), ScheduleHostTool(SCHEDULE_DELETE, self.delete)]


def register_schedule_tools(toolbox: Any, sessions: async_sessionmaker[AsyncSession], user_id: str, task: Any,
                            in_scheduled_run: bool, *, default_timezone: str) -> ScheduleTools:
    """Add the four tools to a `RunnerToolBox` (anything with `add_host_tool(tool)`);
    `default_timezone`: the runner's `ZCBOT_SCHEDULE_DEFAULT_TIMEZONE`."""
    tools = ScheduleTools(sessions, user_id, task, in_scheduled_run, default_timezone=default_timezone)
    for tool in tools.host_tools():
        toolbox.add_host_tool(tool)
    return tools
