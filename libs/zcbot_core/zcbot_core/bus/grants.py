"""Run grants: the executor trusts no bare user id (issue 22).

Whoever accepts a user's message for a run (the gateway, the scheduler, the channels service: the
callers of `runstate.submit`) signs `run_id | user_id | task_id | expiry` with `ZCBOT_RUN_GRANT_KEY`;
the grant rides in the `RunRequest` (or in the waiting message, for a run started behind another)
and the runner copies it into every `ToolCallRequest`. The executor verifies it: a call naming a run
of another user, another task or no grant at all is refused. The runner never holds the key (it
starts chained runs with the grant made when their message was accepted), so runner credentials
alone cannot act for a user who has no run.

HMAC-SHA256, no round trip: the check costs microseconds per call (a KV lookup would cost a
NATS round trip per call). The expiry bounds a grant's life: a run's message is accepted, waits,
and runs within `GRANT_TTL_SECONDS` (docs/decisions.md); the end of its run ends it sooner
(`bus/ended_runs.py`: the executor refuses a grant of an ended run).
"""

from __future__ import annotations

import hashlib
import hmac
import time

GRANT_TTL_SECONDS = 48 * 3600.0
_VERSION = "g1"


def _mac(key: str, run_id: str, user_id: str, task_id: str, expires: int) -> str:
    msg = f"{_VERSION}|{run_id}|{user_id}|{task_id}|{expires}".encode()
    return hmac.new(key.encode(), msg, hashlib.sha256).hexdigest()


def issue(key: str | None, run_id: str, user_id: str, task_id: str, now: float | None = None,
          ttl: float = GRANT_TTL_SECONDS) -> str:
    """The grant of one run ("" without a key: an executor with a key then refuses its calls)."""
    if not key:
        return ""
    expires = int((now if now is not None else time.time()) + ttl)
    return f"{_VERSION}.{expires}.{_mac(key, run_id, user_id, task_id, expires)}"


def refusal(key: str, grant: str, run_id: str, user_id: str, task_id: str, now: float | None = None) -> str | None:
    """Why the executor refuses a call with `grant`, or None when the grant is this run's and current."""
    version, _, rest = grant.partition(".")
    expires_text, _, mac = rest.partition(".")
    if version != _VERSION or not expires_text.isdigit() or not mac:
        return "the call carries no valid run grant"
    if not hmac.compare_digest(mac, _mac(key, run_id, user_id, task_id, int(expires_text))):
        return "the run grant does not match this user, task and run"
    if int(expires_text) < (now if now is not None else time.time()):
        return "the run grant has expired"
    return None
