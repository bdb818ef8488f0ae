"""Fencing a superseded execution (issue 23): when JetStream redelivers a run whose owner is still
executing it (its in-progress acks were lost, e.g. through a leader election longer than ack_wait),
the new owner's claim takes the run over and the old execution must stop and publish nothing more.

Two signals, the first prompt, the second a backstop:
- the claim that took the run from another runner publishes a takeover (`CancelRequest`, reason
  `superseded`, carrying the new owner) on the run's cancel subject; every runner executing the run
  under another owner drops its queued events and cancels the run (the agent loop's cancel race
  preempts an LLM stream or tool call at once);
- each execution checks its ownership in PostgreSQL every ack_wait/3 (at least 1 s; one primary-key
  read), for a takeover message lost while NATS reconnected: the events it sent meanwhile are the
  price of a lost message, bounded by that interval.
PostgreSQL writes of the old owner were already fenced by owner (`RunSuperseded`, `end_run`), so
`done` is only ever sent by the run's current owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from zcbot_core.bus import CancelRequest, encode
from zcbot_core.bus.messages import RunRequest
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import sql

log = logging.getLogger(__name__)
SUPERSEDED = "superseded"  # the cancel reason of a takeover


async def announce_takeover(rt: Runtime, req: RunRequest, owner: str) -> None:
    """Tell the previous owner to stop. Core NATS, fire and forget: a lost message is covered by the
    ownership check; never stored in the cancel KV (the new execution would read it as its own cancel)."""
    try:
        await rt.nc.publish(rt.topo.cancel_subject(req.task_id),
                            encode(CancelRequest(task_id=req.task_id, run_id=req.run_id, reason=SUPERSEDED,
                                                 owner=owner)))
    except Exception as exc:
        log.warning("could not announce a run takeover; the old owner's ownership check will stop it",
                    extra={"run_id": req.run_id, "error": repr(exc)})


def is_takeover_of_other(req: CancelRequest, owner: str) -> bool | None:
    """None: not a takeover; True: another runner took the run (stop); False: this runner's own."""
    if req.reason != SUPERSEDED:
        return None
    return req.owner != owner


async def held_by_other(rt: Runtime, task_id: str, run_id: str, owner: str) -> bool:
    """The run is still this run and another runner owns it. A run that ended (no owner) or moved on
    is not a takeover: the execution is finishing it or already did."""
    async with rt.autocommit.connect() as conn:
        row = (await conn.execute(sql.RUN_HOLDER, {"holder_task": task_id})).first()
    return row is not None and row.run_id == run_id and row.run_owner not in (None, owner)


async def watch_ownership(rt: Runtime, task_id: str, run_id: str, owner: str, on_lost: Callable[[], Any],
                          interval: float) -> None:
    """Until cancelled: every `interval` seconds, `on_lost()` once the run is another runner's."""
    while True:
        await asyncio.sleep(interval)
        try:
            lost = await held_by_other(rt, task_id, run_id, owner)
        except Exception:  # the database is out: the step writes' fence reports it
            continue
        if lost:
            log.warning("run taken over by another runner (ownership check); stopping this execution",
                        extra={"task_id": task_id, "run_id": run_id})
            on_lost()
            return
