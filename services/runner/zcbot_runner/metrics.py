"""Prometheus metrics of the runner."""

from prometheus_client import Counter, Gauge, Histogram

RUNS_STARTED = Counter("zcbot_runs_started_total", "Runs started (including resumed deliveries)")
RUNS_FINISHED = Counter("zcbot_runs_finished_total", "Runs finished by status", ["status"])
QUEUE_WAIT = Histogram("zcbot_run_queue_wait_seconds", "Time from POST to a runner picking the run up",
                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
TTFT = Histogram("zcbot_run_ttft_seconds", "Time to first token of a run",
                 buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
ACTIVE_RUNS = Gauge("zcbot_runner_active_runs", "Runs in flight in this runner process")
FINISH_SECONDS = Histogram("zcbot_run_finish_seconds", "Time to record a run's terminal state and publish done",
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
TOOL_RPC_SECONDS = Histogram("zcbot_tool_rpc_seconds", "Sandbox tool round trip runner -> executor -> sandbox -> back",
                             ["tool"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120))
EVENTS_REPUBLISHED = Counter("zcbot_events_republished_total",
                             "Run event publishes retried (no ack: a leader election, a NATS restart); deduplicated "
                             "by Nats-Msg-Id")
EVENTS_FAILED = Counter("zcbot_events_failed_total",
                        "Run events that could not be stored within ZCBOT_EVENT_PUBLISH_RETRY_SECONDS (their run "
                        "ends in error saying so)")
