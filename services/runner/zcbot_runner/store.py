"""Completed steps and usage into PostgreSQL, each committed before the next LLM call."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.db.models import Task, UsageEvent
from zcbot_core.llm.client import Usage
from zcbot_core.runs import append_message


class RunSuperseded(Exception):
    """The run is no longer this execution's: another runner claimed it (a redelivery after this
    runner's heartbeats were lost, e.g. across a NATS restart) or it was ended meanwhile. The
    execution stops without writing, finishing or acking anything."""


class DbStepStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, task_id: str, user_id: str, run_id: str,
                 profile: str, owner: str | None = None) -> None:
        self.sessions = sessions
        self.task_id = task_id
        self.user_id = user_id
        self.run_id = run_id
        self.profile = profile
        self.owner = owner

    async def append(self, payload: dict[str, Any], *, kind: str = "chat", tokens_in: int | None = None,
                     tokens_out: int | None = None) -> None:
        async with self.sessions() as session, session.begin():
            # Lock the task row: idx allocation must not race with a concurrent append. With an owner,
            # the lock doubles as a fence: only the execution that holds the run may write its steps.
            lock = update(Task).where(Task.task_id == self.task_id)
            if self.owner is not None:
                lock = lock.where(Task.run_id == self.run_id, Task.run_owner == self.owner)
            result = await session.execute(lock.values(updated_at=Task.updated_at))
            if self.owner is not None and not result.rowcount:
                raise RunSuperseded(self.run_id)
            await append_message(session, self.task_id, payload, kind=kind, run_id=self.run_id,
                                 model_profile=self.profile, tokens_in=tokens_in, tokens_out=tokens_out)

    async def record_usage(self, usage: Usage, cost_usd: float, profile: str) -> None:
        cost = Decimal(str(round(cost_usd, 6)))
        async with self.sessions() as session, session.begin():
            session.add(UsageEvent(
                user_id=self.user_id, task_id=self.task_id, run_id=self.run_id, kind="chat", model_profile=profile,
                units={"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                       "cached_tokens": usage.cached_tokens},
                cost=cost,
            ))
            await session.execute(
                update(Task).where(Task.task_id == self.task_id).values(
                    tokens_in=Task.tokens_in + usage.prompt_tokens,
                    tokens_out=Task.tokens_out + usage.completion_tokens,
                    tokens_cached=Task.tokens_cached + usage.cached_tokens,
                    cost_usd=Task.cost_usd + cost,
                )
            )
