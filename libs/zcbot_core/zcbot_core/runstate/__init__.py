"""The run state machine, in one package (issue 21):

- `status`: `RunStatus`, `RunOutcome`, `ACTIVE` / `CLAIMED` (the statuses, named once).
- `sql`: every statement, built once with bind parameters.
- `submit`: the submit transition (`submit_message`: fast path and fallback).
- `claim`: the claim transition (`claim_run`).
- `transitions`: cancel (`request_cancel`), end (`end_run`), reap (`reap`) and the parts they share
  (`start_next_input`, `continue_after_end`: the one path of every end).
- `matrix`: every status x every event, the transitions' decisions and the tests' reference (issue 34).
- `invariants`: what holds between any two transitions (`violations`, read from PostgreSQL and JetStream).
- `errors`: the transitions' domain errors.

Services keep only the orchestration around these (the runner: deliveries, heartbeats, events).
"""

from zcbot_core.runstate.status import ACTIVE, CLAIMED, RunOutcome, RunStatus

__all__ = ["ACTIVE", "CLAIMED", "RunOutcome", "RunStatus"]
