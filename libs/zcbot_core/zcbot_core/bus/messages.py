"""Bus messages other than run events: one dataclass per message so fields can be added."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zcbot_core.bus.codec import message


@message("run_request")
@dataclass
class RunRequest:
    """Published to `run_subject(task_id)`; `Nats-Msg-Id` = run_id dedupes re-publishes."""

    run_id: str
    task_id: str
    user_id: str
    enqueued_at: float
    origin: str = "web"  # web | scheduler | channel:<name>
    scheduled_job_id: str | None = None
    grant: str = ""  # bus/grants.py: the executor's proof that this run is this user's


@message("cancel")
@dataclass
class CancelRequest:
    task_id: str
    run_id: str
    reason: str = "user"  # user | timeout | interrupt | shutdown | superseded
    # A takeover (reason "superseded", never stored in the cancel KV): the runner that claimed the run
    # from another. Every other runner executing the run stops; this owner's own execution ignores it.
    owner: str = ""


@message("tool_call")
@dataclass
class ToolCallRequest:
    """A sandbox tool call, runner -> executor. `cwd` is the task folder relative to the user root."""

    call_id: str
    user_id: str
    task_id: str
    run_id: str
    tool: str
    args: dict[str, Any]
    cwd: str
    timeout: float
    grant: str = ""  # the run's grant (bus/grants.py), copied from its RunRequest


@message("tool_reply")
@dataclass
class ToolCallReply:
    call_id: str
    ok: bool
    output: str
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    host: str = ""


@message("tool_cancel")
@dataclass
class ToolCancel:
    call_id: str


@message("exec_probe")
@dataclass
class ExecutorProbe:
    """Liveness check on a host's control subject (`exec_cancel_subject(host)`): is the host
    serving, and is `call_id` (when given) running there? Answered with `ExecutorProbeReply`."""

    call_id: str = ""


@message("exec_probe_reply")
@dataclass
class ExecutorProbeReply:
    call_id: str  # the probe's, echoed
    host: str
    running: bool  # `call_id` is in flight on this host (False when no call_id was asked about)
    draining: bool = False


@message("bg_stop")
@dataclass
class BackgroundStop:
    """A task's run was cancelled or the task deleted: every executor kills the background
    processes it launched for that task, except those started with keep=true."""

    user_id: str
    task_id: str
    reason: str  # "run cancelled" | "task deleted"
    # The sender's proof that this user's task is meant (`bus/grants.py`): signed by the gateway or
    # the scheduler, which hold the grant key; the executor refuses a stop without it.
    run_id: str = ""
    grant: str = ""


@message("file_changes")
@dataclass
class FileChangesReport:
    """What a background process did to the user's files (issue 29), published by the executor that
    launched it when it ended (JetStream, `Nats-Msg-Id` = user and proc id) and recorded by a runner as
    the `data_events` of the run that started it, once per (user, proc id) (`file_reports_recorded`).
    `changes` are `filehistory.Change.as_dict()`s."""

    user_id: str
    task_id: str
    run_id: str
    proc_id: str
    changes: list[dict[str, Any]] = field(default_factory=list)
    more: int = 0  # changes past the cap (not listed)


# The web's background-process cards (GET /v1/procs, POST /v1/procs/{id}/kill): the gateway asks any
# executor (queue group on `exec_procs_subject`); the process folders are the user's, so any host
# lists them and any host can kill through the wrapper's kill file (zcbot_executor/background/web.py).
PROCS_GRANT_RUN = "procs"  # the grant's run id for these requests (signed for the user, task "")


@message("procs")
@dataclass
class ProcsRequest:
    user_id: str
    action: str = "list"  # list | kill
    proc_id: str = ""  # kill: the one to stop
    task_id: str = ""  # list: only this task's ("" = all of the user's)
    grant: str = ""  # grants.issue(key, PROCS_GRANT_RUN, user_id, ""): only the gateway can ask for a user


@message("procs_reply")
@dataclass
class ProcsReply:
    ok: bool
    procs: list[dict[str, Any]] = field(default_factory=list)  # kill: the stopped one, when found
    error: str = ""  # "not_found" | "refused" | "bad_request: ..."


@message("push")
@dataclass
class PushRequest:
    """Ask the channels service to deliver text (and optionally a file under the user root)."""

    user_id: str
    text: str
    file_path: str | None = None
    channel: str | None = None  # None = every active channel
    origin: str = "tool"  # tool | scheduler


@message("push_reply")
@dataclass
class PushReply:
    delivered: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


@message("channel_inbound")
@dataclass
class ChannelInbound:
    """A verified, decrypted inbound channel message (gateway -> channels service, via JetStream)."""

    channel: str
    sender: str
    key: str  # the channel's message id: dedupe and pending-reply key
    msg_type: str
    fields: dict[str, Any]
    received_at: float


@message("egress_usage")
@dataclass
class EgressUsageReport:
    """An executor's egress bytes since its last report, per user and hour (epoch seconds // 3600);
    `users` with no bytes only ask for their totals (a user's first connection on this host)."""

    host: str
    bytes: dict[str, dict[str, int]] = field(default_factory=dict)  # user -> {hour: bytes}
    users: list[str] = field(default_factory=list)


@message("egress_usage_reply")
@dataclass
class EgressUsageReply:
    """Each reported or asked-for user's bytes over the window, every host counted."""

    totals: dict[str, int] = field(default_factory=dict)
    window_seconds: int = 86400
