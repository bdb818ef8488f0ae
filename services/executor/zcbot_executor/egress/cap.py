"""The per-user egress byte cap (ZCBOT_USER_EGRESS_MB_PER_DAY): bytes both ways of all of a user's
connections over the last 24 hours, on every executor host.

The window rolls in hourly buckets, so a user over the cap gets allowance back hour by hour rather
than all at once at midnight (a calendar day would allow twice the cap around midnight). Two views:
this host's own count in memory, and the shared one (issue 40): the bytes not yet reported
(`take_pending`) go to PostgreSQL through a runner (`zcbot_core.egress_usage`), whose answer is the
user's total on every host (`set_totals`). A user's use is the larger of this host's count and
shared total + in flight + pending, so N hosts no longer allow N× the cap and a restart forgets
nothing; with no runner answering, the host's own count still holds the cap as before.
Thread-safe: the event loop adds, proxy.py's threads ask.
"""

from __future__ import annotations

import threading
import time
from collections import deque

WINDOW_SECONDS = 24 * 3600
BUCKET_SECONDS = 3600

TEXT = ("zcbot 出站代理：已拒绝：此用户 24 小时内的出站流量已达上限 {mb} MB（ZCBOT_USER_EGRESS_MB_PER_DAY），"
        "请稍后再试或联系管理员。\n"
        "zcbot egress proxy: refused: this user's egress in the last 24 hours reached the cap of {mb} MB "
        "(ZCBOT_USER_EGRESS_MB_PER_DAY); try again later or ask the operator.\n")
"""The 403 body of a connection refused at the cap (Chinese first: the proxy does not know the
user's language)."""


class ByteCap:
    def __init__(self, limit_bytes: int) -> None:
        self.limit = max(0, limit_bytes)  # 0: no cap (nothing is counted)
        self._buckets: dict[str, deque[list[int]]] = {}  # user -> [[hour, bytes], ...], oldest first
        self._lock = threading.Lock()
        self._pending: dict[str, dict[int, int]] = {}  # user -> {hour: bytes} not reported yet
        self._inflight: dict[str, int] = {}  # user -> bytes of the report awaiting its answer
        self._shared: dict[str, int] = {}  # user -> every host's total in the window, as last answered

    @property
    def limit_mb(self) -> int:
        return self.limit // 2**20

    def refusal_text(self) -> str:
        return TEXT.format(mb=self.limit_mb)

    def _used(self, user_id: str, now: float) -> int:
        buckets = self._buckets.get(user_id)
        if not buckets:
            return 0
        oldest = int(now // BUCKET_SECONDS) - WINDOW_SECONDS // BUCKET_SECONDS + 1
        while buckets and buckets[0][0] < oldest:
            buckets.popleft()
        if not buckets:  # nothing in the window: forget the user (memory stays bounded by active users)
            del self._buckets[user_id]
            return 0
        return sum(b[1] for b in buckets)

    def add(self, user_id: str, n: int, now: float | None = None) -> bool:
        """Count `n` bytes of the user's; True when the user is now at or over the cap."""
        if not self.limit or n <= 0:
            return False
        now = time.time() if now is None else now
        hour = int(now // BUCKET_SECONDS)
        with self._lock:
            buckets = self._buckets.setdefault(user_id, deque())
            if buckets and buckets[-1][0] == hour:
                buckets[-1][1] += n
            else:
                buckets.append([hour, n])
            hours = self._pending.setdefault(user_id, {})
            hours[hour] = hours.get(hour, 0) + n
            return self._use(user_id, now) >= self.limit

    def _use(self, user_id: str, now: float) -> int:
        local = self._used(user_id, now)
        if user_id not in self._shared:
            return local
        shared = self._shared[user_id] + self._inflight.get(user_id, 0) + sum(self._pending.get(user_id, {}).values())
        return max(local, shared)

    def used(self, user_id: str, now: float | None = None) -> int:
        with self._lock:
            return self._use(user_id, time.time() if now is None else now)

    # ---- the shared count (PostgreSQL, through a runner) --------------------------------------

    def known(self, user_id: str) -> bool:
        """Has the shared total of this user been read (since this executor started)?"""
        with self._lock:
            return user_id in self._shared

    def take_pending(self) -> dict[str, dict[int, int]]:
        """The bytes not reported yet, moved to "in flight" until `set_totals` or `restore`."""
        with self._lock:
            taken, self._pending = self._pending, {}
            for user, hours in taken.items():
                self._inflight[user] = self._inflight.get(user, 0) + sum(hours.values())
            return taken

    def restore(self, taken: dict[str, dict[int, int]]) -> None:
        """A report that got no answer: its bytes are pending again (sent with the next one)."""
        with self._lock:
            for user, hours in taken.items():
                self._inflight[user] = max(0, self._inflight.get(user, 0) - sum(hours.values()))
                mine = self._pending.setdefault(user, {})
                for hour, n in hours.items():
                    mine[hour] = mine.get(hour, 0) + n

    def set_totals(self, taken: dict[str, dict[int, int]], totals: dict[str, int]) -> None:
        """The answer to a report of `taken`: every host's totals, `taken` included."""
        with self._lock:
            for user, hours in taken.items():
                self._inflight[user] = max(0, self._inflight.get(user, 0) - sum(hours.values()))
                if not self._inflight[user]:
                    del self._inflight[user]
            for user, total in totals.items():
                self._shared[user] = max(0, int(total))

    def over(self, user_id: str, now: float | None = None) -> bool:
        """Is the user at or over the cap (a new connection is refused)?"""
        return bool(self.limit) and self.used(user_id, now) >= self.limit
