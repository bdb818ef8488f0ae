"""Per-user slots for tool calls (issue 36): at most ZCBOT_USER_MAX_CONCURRENT_CALLS calls of one user
run at once on an executor; the rest wait for a slot of their own user.

The executor's shared cap (ZCBOT_EXECUTOR_MAX_CONCURRENCY, 256) is taken only after the user's slot,
so one user's flood (many runs, or a bus client with that user's grants) holds at most its own few
shared slots, and another user's call never queues behind it. A waiting call still counts as running
for the client's liveness probe and can be cancelled while it waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass
class _User:
    slots: asyncio.Semaphore
    holders: int = 0  # calls holding or waiting for a slot; the entry goes when none is left


class UserSlots:
    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._users: dict[str, _User] = {}

    @asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        user = self._users.get(user_id)
        if user is None:
            user = self._users[user_id] = _User(asyncio.Semaphore(self.per_user))
        user.holders += 1
        try:
            async with user.slots:
                yield
        finally:
            user.holders -= 1
            if user.holders == 0 and self._users.get(user_id) is user:
                del self._users[user_id]
