"""The per-user egress byte cap (ZCBOT_USER_EGRESS_MB_PER_DAY): bytes both ways of all of a user's
connections on this executor host over the last 24 hours.

The window rolls in hourly buckets, so a user over the cap gets allowance back hour by hour rather
than all at once at midnight (a calendar day would allow twice the cap around midnight). The count
is in memory, per host: an executor restart forgets it and N hosts allow N× the cap, like the disk
meter's per-host view — the cap stops a runaway download loop, it is not a billing record (the
audit log is). Thread-safe: the event loop adds, proxy.py's threads ask.
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
            return self._used(user_id, now) >= self.limit

    def used(self, user_id: str, now: float | None = None) -> int:
        with self._lock:
            return self._used(user_id, time.time() if now is None else now)

    def over(self, user_id: str, now: float | None = None) -> bool:
        """Is the user at or over the cap (a new connection is refused)?"""
        return bool(self.limit) and self.used(user_id, now) >= self.limit
