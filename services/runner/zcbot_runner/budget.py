"""The runner's side of the per-user cost budget (zcbot_core.accounts.budgets) around each LLM call.

A call's reservation is not deleted when the call returns but with the run's next reservation (in
the same transaction) or at the run's end (`close`, after `end_run`): the store keeps a run's last
step to write with the run's end, so until then that call's usage event may not exist yet, and the
reservation stands in for it. Either way one user's spend is never counted lower than it is.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.accounts import budgets
from zcbot_core.agent.lang import Lang
from zcbot_core.db.engine import autocommit
from zcbot_core.db.models import BudgetReservation
from zcbot_core.llm.profiles import Profile


class RunBudget:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, user_id: str, run_id: str,
                 defaults: budgets.Defaults) -> None:
        self.sessions, self.user_id, self.run_id, self.defaults = sessions, user_id, run_id, defaults
        self._settled: list[int] = []
        self._known_unlimited = False  # `prime`: the next call needs no read of the user's limits

    def prime(self, user_has_own_limit: bool) -> None:
        """What the run's claim read of the user's own limits (a moment ago): the first call uses it
        instead of reading them again. Later calls read them (an admin's new limit counts from there)."""
        self._known_unlimited = not user_has_own_limit and self.defaults.daily <= 0 and self.defaults.monthly <= 0

    async def reserve(self, profile: Profile, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      lang: Lang) -> int | None:
        known_unlimited, self._known_unlimited = self._known_unlimited, False
        if not self._settled and (known_unlimited or not await budgets.any_limit(
                autocommit(self.sessions), self.user_id, self.defaults)):
            return None  # no limit: nothing to hold, no lock (a reservation exists only under a limit)
        amount = budgets.worst_case(profile, messages, tools)
        async with self.sessions() as session:
            await self._drop_settled(session)
            return await budgets.reserve(session, user_id=self.user_id, run_id=self.run_id, amount=amount,
                                         defaults=self.defaults, lang=lang)

    async def release(self, token: int | None) -> None:
        if token is not None:
            self._settled.append(token)

    async def close(self) -> None:
        """The run ended (its last step is stored): its remaining reservations go."""
        if self._settled:
            async with self.sessions() as session:
                await self._drop_settled(session)
                await session.commit()

    async def _drop_settled(self, session: AsyncSession) -> None:
        if self._settled:
            await session.execute(delete(BudgetReservation).where(BudgetReservation.id.in_(self._settled)))
            self._settled = []
