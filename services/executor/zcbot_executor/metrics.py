"""Prometheus metrics of the executor (served on /metrics by the service runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TOOL_CALLS = Counter("zcbot_tool_calls_total", "Sandbox tool calls by tool and outcome", ["tool", "outcome"])
TOOL_SECONDS = Histogram(
    "zcbot_tool_call_seconds", "Sandbox tool call duration on the executor", ["tool"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
SANDBOXES = Gauge("zcbot_executor_sandboxes", "Live sandboxes on this executor")
# Egress (egress/hub.py): totals only; the per-user figures are in the audit log and EgressHub.usage
# (a user label would make one time series per user).
EGRESS_BYTES = Counter("zcbot_egress_bytes_total", "Bytes through the sandbox egress proxy", ["direction"])
EGRESS_CONNECTIONS = Counter("zcbot_egress_connections_total", "Sandbox egress connections by outcome", ["outcome"])
EGRESS_CAPPED = Counter("zcbot_egress_capped_total", "Sandbox egress connections stopped by the per-user byte cap "
                        "(refused: a new one; cut: a running one closed)", ["action"])
