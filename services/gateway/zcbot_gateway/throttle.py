"""Login throttling: failed sign-ins per account and per client address in a sliding minute.

Only failures count (a platform signing its users in, or a user who types the right password, is
never slowed down); once a key holds `limit` failures within `window` seconds, every sign-in for it
is refused with 429 and a `Retry-After` of the seconds until its oldest failure leaves the window,
before any password or key is checked (no bcrypt work is spent on a throttled guess).

The counts live in the gateway process (docs/decisions.md): with N gateway replicas an attacker gets
at most N times the limit, still far from a usable guessing rate; nothing is stored or shared.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable

from zcbot_core.errors import ZcbotError

# Keys kept at most (each a deque of at most `limit` timestamps): a flood of distinct emails or
# addresses cannot grow the process without bound; the oldest key is dropped first.
MAX_KEYS = 100_000


class LoginThrottled(ZcbotError):
    """Too many failed sign-ins for this account or from this address (429 with Retry-After)."""

    code = "too_many_attempts"
    http_status = 429

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"登录失败次数过多，请 {retry_after} 秒后再试")
        self.headers = {"Retry-After": str(retry_after)}  # type: ignore[misc]


class LoginThrottle:
    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._failures: dict[str, deque[float]] = {}

    def check(self, keys: Iterable[str]) -> None:
        """Raise `LoginThrottled` when any key is at its limit (limit 0: throttling off)."""
        if self.limit <= 0:
            return
        now = self._clock()
        wait = 0.0
        for key in keys:
            stamps = self._recent(key, now)
            if stamps is not None and len(stamps) >= self.limit:
                wait = max(wait, stamps[0] + self.window - now)
        if wait > 0:
            raise LoginThrottled(max(1, math.ceil(wait)))

    def failed(self, keys: Iterable[str]) -> None:
        if self.limit <= 0:
            return
        now = self._clock()
        for key in keys:
            stamps = self._recent(key, now)
            if stamps is None:
                if len(self._failures) >= MAX_KEYS:
                    del self._failures[next(iter(self._failures))]
                stamps = self._failures[key] = deque(maxlen=self.limit)
            stamps.append(now)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        stamps = self._failures.get(key)
        if stamps is None:
            return None
        while stamps and stamps[0] <= now - self.window:
            stamps.popleft()
        if not stamps:
            del self._failures[key]
            return None
        return stamps
