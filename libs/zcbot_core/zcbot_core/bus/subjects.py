"""Subject, stream, consumer and KV bucket names, built by functions from one prefix.

A prefix (default `zcbot`) lets several stacks or test cases share one NATS server without
seeing each other: `Topology("t1a2")` yields `t1a2.runs.<task>` and stream `T1A2_RUNS`.
Protocol version: names carry no version; messages carry `v` (see `codec`), and an incompatible
change gets new names through `PROTOCOL_VERSION`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROTOCOL_VERSION = 1
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def _token(value: str) -> str:
    """Subject tokens must not contain `.`, `*`, `>` or whitespace: ids are checked here once."""
    if not _TOKEN.match(value):
        raise ValueError(f"invalid subject token: {value!r}")
    return value


@dataclass(frozen=True)
class Topology:
    prefix: str = "zcbot"

    def __post_init__(self) -> None:
        _token(self.prefix)

    # ---- names -----------------------------------------------------------------------------
    @property
    def _upper(self) -> str:
        return self.prefix.upper().replace("-", "_")

    @property
    def runs_stream(self) -> str:
        return f"{self._upper}_RUNS"

    @property
    def events_stream(self) -> str:
        return f"{self._upper}_EVENTS"

    @property
    def runners_consumer(self) -> str:
        return "runners"

    @property
    def channel_inbound_stream(self) -> str:
        return f"{self._upper}_CHANNEL_IN"

    @property
    def channels_consumer(self) -> str:
        return "channels"

    @property
    def file_changes_stream(self) -> str:
        """Background processes' file changes (issue 29): executor -> runner, work queue."""
        return f"{self._upper}_FILE_CHANGES"

    @property
    def file_changes_consumer(self) -> str:
        return "file-changes"

    @property
    def cancel_bucket(self) -> str:
        return f"{self.prefix}_cancel".replace("-", "_")

    @property
    def sandbox_leases_bucket(self) -> str:
        return f"{self.prefix}_sandbox_leases".replace("-", "_")

    @property
    def leases_bucket(self) -> str:
        return f"{self.prefix}_leases".replace("-", "_")

    @property
    def ended_runs_bucket(self) -> str:
        """Run ids whose run ended (`bus/ended_runs.py`): their grants authorise no more tool calls."""
        return f"{self.prefix}_ended_runs".replace("-", "_")

    @property
    def kv_buckets(self) -> tuple[str, ...]:
        """Every KV bucket of the prefix (declared by `ensure_topology`, allowed by `bus/access.py`)."""
        return (self.cancel_bucket, self.sandbox_leases_bucket, self.leases_bucket, self.ended_runs_bucket)

    @property
    def executor_service_name(self) -> str:
        return f"{self.prefix}-executor"

    # ---- queue groups (a subscription in a group shares the subject's messages with its peers) ----
    @property
    def executor_queue_group(self) -> str:
        """Every executor, for calls on the unassigned subject."""
        return f"{self.prefix}-executors"

    def executor_host_queue_group(self, host: str) -> str:
        """The executors of one host id (normally one process), for calls leased to that host."""
        return f"{self.executor_queue_group}-{_token(host)}"

    @property
    def runner_advisories_queue_group(self) -> str:
        """The runners, for the runs consumer's max-deliveries advisory (one runner handles each)."""
        return f"{self.runners_consumer}-advisories"

    @property
    def egress_usage_queue_group(self) -> str:
        """The runners, for egress usage reports (one runner records each)."""
        return f"{self.prefix}-egress-usage"

    @property
    def channels_push_queue_group(self) -> str:
        """The channels service replicas, for push requests (one replica delivers each)."""
        return f"{self.prefix}-channels"

    # ---- subjects --------------------------------------------------------------------------
    def run_subject(self, task_id: str) -> str:
        return f"{self.prefix}.runs.{_token(task_id)}"

    def runs_wildcard(self) -> str:
        return f"{self.prefix}.runs.*"

    def event_subject(self, task_id: str) -> str:
        return f"{self.prefix}.ev.{_token(task_id)}"

    def events_wildcard(self) -> str:
        return f"{self.prefix}.ev.*"

    def task_of_event_subject(self, subject: str) -> str:
        return subject.rsplit(".", 1)[-1]

    def cancel_subject(self, task_id: str) -> str:
        return f"{self.prefix}.cancel.{_token(task_id)}"

    def cancel_wildcard(self) -> str:
        return f"{self.prefix}.cancel.*"

    def exec_call_subject(self, host: str) -> str:
        """Calls for users leased to `host`."""
        return f"{self.prefix}.exec.{_token(host)}.call"

    def exec_any_subject(self) -> str:
        """Calls for users without a lease: any executor (queue group) takes them."""
        return f"{self.prefix}.exec.any.call"

    def exec_cancel_subject(self, host: str) -> str:
        return f"{self.prefix}.exec.{_token(host)}.cancel"

    def exec_background_stop_subject(self) -> str:
        """`BackgroundStop` broadcasts: every executor subscribes (no queue group)."""
        return f"{self.prefix}.exec.bgstop"

    def exec_procs_subject(self) -> str:
        """`ProcsRequest` (list / kill a user's background processes): any executor (queue group)."""
        return f"{self.prefix}.exec.procs"

    def file_changes_subject(self) -> str:
        """`FileChangesReport`s: what a background process did to the user's files, once it ended."""
        return f"{self.prefix}.fchg"

    def egress_usage_subject(self) -> str:
        """`EgressUsageReport`s (executor -> a runner, request/reply): bytes through the egress proxy,
        recorded in PostgreSQL; the reply is each user's total across hosts (the per-user cap)."""
        return f"{self.prefix}.egress.usage"

    def channel_inbound_subject(self, channel: str) -> str:
        """Inbound channel messages received by a gateway, handled durably by the channels service."""
        return f"{self.prefix}.chin.{_token(channel)}"

    def channel_inbound_wildcard(self) -> str:
        return f"{self.prefix}.chin.*"

    def push_subject(self, user_id: str) -> str:
        return f"{self.prefix}.push.{_token(user_id)}"

    def push_wildcard(self) -> str:
        return f"{self.prefix}.push.*"

    # ---- KV keys ---------------------------------------------------------------------------
    @staticmethod
    def kv_key(value: str) -> str:
        return _token(value)
