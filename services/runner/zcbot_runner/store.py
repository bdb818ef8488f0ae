"""Completed steps and usage into PostgreSQL, each committed before the next LLM call."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.db.models import Task
from zcbot_core.llm.client import Usage
from zcbot_core.runs import append_message
from zcbot_core.usage import TASK_TOTALS_DELTA, insert_usage_event, record_usage, to_cost, totals_params


class RunSuperseded(Exception):
    """The run is no longer this execution's: another runner claimed it (a redelivery after this
    runner's heartbeats were lost, e.g. across a NATS restart) or it was ended meanwhile. The
    execution stops without writing, finishing or acking anything."""


_tasks = Task.__table__


def _fence_statement(owned: bool, counters: bool) -> Any:
    stmt = update(_tasks).where(_tasks.c.task_id == bindparam("fence_task"))
    if owned:
        stmt = stmt.where(_tasks.c.run_id == bindparam("fence_run"), _tasks.c.run_owner == bindparam("fence_owner"))
    values: dict[str, Any] = {"updated_at": _tasks.c.updated_at}
    if counters:  # the task's running totals, in the same statement
        values.update(TASK_TOTALS_DELTA)
    return stmt.values(**values)


# Built once: building the expressions per step cost more CPU than the round trips.
_FENCES = {(owned, counters): _fence_statement(owned, counters) for owned in (True, False) for counters in (True, False)}


class DbStepStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, task_id: str, user_id: str, run_id: str,
                 profile: str, owner: str | None = None) -> None:
        self.sessions = sessions
        self.task_id = task_id
        self.user_id = user_id
        self.run_id = run_id
        self.profile = profile
        self.owner = owner

    def _fence(self, counters: bool = False) -> tuple[Any, dict[str, Any]]:
        """Lock the task row: idx allocation must not race with a concurrent append. With an owner,
        the lock doubles as a fence: only the execution that holds the run may write its steps."""
        params = {"fence_task": self.task_id}
        if self.owner is not None:
            params.update(fence_run=self.run_id, fence_owner=self.owner)
        return _FENCES[(self.owner is not None, counters)], params

    async def append(self, payload: dict[str, Any], *, kind: str = "chat", tokens_in: int | None = None,
                     tokens_out: int | None = None) -> None:
        async with self.sessions() as session, session.begin():
            result = await session.execute(*self._fence())
            if self.owner is not None and not result.rowcount:
                raise RunSuperseded(self.run_id)
            await append_message(session, self.task_id, payload, kind=kind, run_id=self.run_id,
                                 model_profile=self.profile, tokens_in=tokens_in, tokens_out=tokens_out)

    async def append_llm_step(self, message: dict[str, Any], usage: Usage, cost_usd: float, profile: str) -> None:
        """The assistant message and its usage in one transaction (one commit per LLM call): the
        fence adds the task's running totals, then the usage event and the message are inserted."""
        cost = to_cost(cost_usd)
        async with self.sessions() as session, session.begin():
            stmt, params = self._fence(counters=True)
            params.update(totals_params(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, cost))
            result = await session.execute(stmt, params)
            if self.owner is None or result.rowcount:
                await insert_usage_event(session, user_id=self.user_id, task_id=self.task_id, run_id=self.run_id,
                                         model_profile=profile, prompt_tokens=usage.prompt_tokens,
                                         completion_tokens=usage.completion_tokens,
                                         cached_tokens=usage.cached_tokens, cost=cost)
                await append_message(session, self.task_id, message, run_id=self.run_id, model_profile=profile,
                                     tokens_in=usage.prompt_tokens, tokens_out=usage.completion_tokens)
                return
        # Superseded: the call was still made and paid for, so its usage is kept; its message is not.
        await self.record_usage(usage, cost_usd, profile)
        raise RunSuperseded(self.run_id)

    async def record_usage(self, usage: Usage, cost_usd: float, profile: str) -> None:
        async with self.sessions() as session, session.begin():
            await record_usage(session, user_id=self.user_id, task_id=self.task_id, run_id=self.run_id,
                               model_profile=profile, prompt_tokens=usage.prompt_tokens,
                               completion_tokens=usage.completion_tokens, cached_tokens=usage.cached_tokens,
                               cost_usd=cost_usd)
