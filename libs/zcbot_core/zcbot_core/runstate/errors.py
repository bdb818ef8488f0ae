"""The run state machine's domain errors (each carries its code and HTTP status; mapped at the edge)."""

from __future__ import annotations

from zcbot_core.errors import ZcbotError


class RunConflict(ZcbotError):
    """A run is already active on the task and the caller's strategy forbids another (409)."""

    code, http_status = "run_conflict", 409


class KeyReused(ZcbotError):
    """A message sent with the `Idempotency-Key` of another message of the task (409): a client's bug,
    answered rather than guessing which text the sender meant."""

    code, http_status = "idempotency_key_reused", 409
    public_detail = "this Idempotency-Key was used for another message of this task; use a new key per message"


class RunQuotaExceeded(ZcbotError):
    """The per-user concurrent-run cap or the global queue bound is reached (429)."""

    code, http_status = "run_quota_exceeded", 429


class NothingToCancel(ZcbotError):
    """Cancel requested while no run is active (409)."""

    code, http_status = "nothing_to_cancel", 409


class TaskNotFound(ZcbotError):
    """No such task for this user (404)."""

    code, http_status, public_detail = "task_not_found", 404, "task not found"


class UserNotFound(TaskNotFound):
    """The submitting user no longer exists (a valid token of a deleted user: 401 at the HTTP edge)."""

    code, http_status, public_detail = "user_gone", 401, "invalid token: user does not exist"
    headers = {"WWW-Authenticate": "Bearer"}


class WrongChannel(ZcbotError):
    """The task belongs to another channel (409): its conversation continues there."""

    code, http_status = "wrong_channel", 409

    def __init__(self, channel: str) -> None:
        super().__init__(f"this task belongs to the {channel} channel; reply there")
        self.channel = channel


class BusUnavailable(ZcbotError):
    """The run could not be handed to JetStream (503); the task is left in `error`, not stuck."""

    code, http_status = "bus_unavailable", 503
