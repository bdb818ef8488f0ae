"""Completed steps and usage into PostgreSQL, each committed before the next LLM call.

The run's owner writes a step in one autocommit statement (`runstate.sql.OWNED_STEP`); the transaction
(fence row lock, then the inserts) is kept for writers without an owner and for the rare step that
the statement cannot place (another writer appended to the task meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from zcbot_core.accounts.usage import insert_usage_event, record_usage, to_cost, totals_params, usage_event_params
from zcbot_core.errors import ZcbotError
from zcbot_core.llm.client import Usage
from zcbot_core.runstate.sql import LAST_STEP_AND_END, OWNED_STEP, STEP_FENCES
from zcbot_core.runstate.transitions import append_message, append_params, end_params


class RunSuperseded(ZcbotError):
    """The run is no longer this execution's: another runner claimed it (a redelivery after this
    runner's heartbeats were lost, e.g. across a NATS restart) or it was ended meanwhile. The
    execution stops without writing, finishing or acking anything."""

    code = "run_superseded"
    http_status = 409


@dataclass
class _LlmStep:
    message: dict[str, Any]
    usage: Usage
    cost_usd: float
    profile: str


class DbStepStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, task_id: str, user_id: str, run_id: str,
                 profile: str, owner: str | None = None, autocommit: AsyncEngine | None = None) -> None:
        """`autocommit` (the autocommit pool, `Runtime.autocommit`) with an `owner`: steps in one statement each."""
        self._last_step: _LlmStep | None = None
        self.sessions = sessions
        self.autocommit = autocommit
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
        return STEP_FENCES[(self.owner is not None, counters)], params

    async def _owned_step(self, statement: Any, params: dict[str, Any]) -> bool | None:
        """The step in one statement (`OWNED_STEP`, `LAST_STEP_AND_END`): True written, False its fence
        missed (nothing written), None when it could not be placed (or there is no owner / autocommit
        pool) and the transaction must write it."""
        if self.owner is None or self.autocommit is None:
            return None
        try:
            async with self.autocommit.connect() as conn:
                fence = {"step_run": self.run_id, "step_owner": self.owner}
                row = (await conn.execute(statement, {**params, **fence})).one()
        except IntegrityError:  # another writer took the idx meanwhile: the statement wrote nothing
            return None
        return row.idx is not None

    async def append(self, payload: dict[str, Any], *, kind: str = "chat", tokens_in: int | None = None,
                     tokens_out: int | None = None) -> None:
        params = append_params(self.task_id, payload, kind=kind, run_id=self.run_id, model_profile=self.profile,
                               tokens_in=tokens_in, tokens_out=tokens_out)
        written = await self._owned_step(OWNED_STEP[False], params)
        if written is False:
            raise RunSuperseded(self.run_id)
        if written:
            return
        async with self.sessions() as session, session.begin():
            result = await session.execute(*self._fence())
            if self.owner is not None and not result.rowcount:
                raise RunSuperseded(self.run_id)
            await append_message(session, self.task_id, payload, kind=kind, run_id=self.run_id,
                                 model_profile=self.profile, tokens_in=tokens_in, tokens_out=tokens_out)

    async def append_llm_step(self, message: dict[str, Any], usage: Usage, cost_usd: float, profile: str,
                              last: bool = False) -> None:
        """The assistant message and its usage, written together (one commit per LLM call): the task's
        running totals, the usage event and the message. The run's `last` step is kept for `end_run`,
        which writes it with the run's end in one statement (an owner with the autocommit pool only)."""
        step = _LlmStep(message, usage, cost_usd, profile)
        if last and self.owner is not None and self.autocommit is not None:
            self._last_step = step
            return
        await self._write_llm_step(step, self._llm_step_params(step))

    async def end_run(self, *, status: str, error: str | None, timings: dict[str, float]) -> bool:
        """The kept last step and the run's end in one autocommit statement (`LAST_STEP_AND_END`): True
        when done. Else (no kept step, a message waits behind the run, or the run is not this owner's)
        the kept step is written as any other (RunSuperseded when the run is not this owner's any more)
        and False says the caller ends the run its usual way."""
        step, self._last_step = self._last_step, None
        if step is None:
            return False
        params = self._llm_step_params(step)
        ending = end_params(self.task_id, self.run_id, status, error, timings, self.owner)
        if await self._owned_step(LAST_STEP_AND_END, {**params, **ending}):
            return True
        await self._write_llm_step(step, params)
        return False

    def _llm_step_params(self, step: _LlmStep) -> dict[str, Any]:
        usage, cost = step.usage, to_cost(step.cost_usd)
        return {
            **append_params(self.task_id, step.message, run_id=self.run_id, model_profile=step.profile,
                            tokens_in=usage.prompt_tokens, tokens_out=usage.completion_tokens),
            **totals_params(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, cost),
            **usage_event_params(user_id=self.user_id, model_profile=step.profile, prompt_tokens=usage.prompt_tokens,
                                 completion_tokens=usage.completion_tokens, cached_tokens=usage.cached_tokens,
                                 cost=cost)}

    async def _write_llm_step(self, step: _LlmStep, params: dict[str, Any]) -> None:
        """`params`: `_llm_step_params(step)`."""
        written = await self._owned_step(OWNED_STEP[True], params)
        if written:
            return
        message, usage, cost_usd, profile = step.message, step.usage, step.cost_usd, step.profile
        cost = to_cost(cost_usd)
        totals = totals_params(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, cost)
        if written is None:
            async with self.sessions() as session, session.begin():
                stmt, params = self._fence(counters=True)
                result = await session.execute(stmt, {**params, **totals})
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
