"""The gateway's background pruning of the file-history tables (`zcbot_core.filehistory.prune`).

The gateway runs it because it has both things the rule reads: the database and the version store
(it already reads and restores versions). Every replica runs its own loop; the deletes are scoped
and idempotent, so two replicas at once only share the work.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from zcbot_core.filehistory.prune import RowPruner
from zcbot_core.platform.worker import periodic
from zcbot_gateway.hooks import add_shutdown_hook, add_startup_hook

log = logging.getLogger(__name__)

PRUNE_EVERY_SECONDS = 3600.0  # rows past a retention counted in days: hourly is prompt enough


def pruner_for(settings: Any) -> RowPruner:
    return RowPruner(settings.storage_root, max_age_days=settings.zcbot_versions_max_age_days,
                     budget_bytes=settings.zcbot_versions_budget_mb * 1024 * 1024)


def install(app: Any) -> None:
    async def start(app: Any) -> None:
        rt, pruner = app.state.rt, pruner_for(app.state.settings)

        async def once() -> None:
            done = await pruner.run(rt.sessions)
            if done.events or done.report_keys or done.versions:
                log.info("file history pruned", extra={"events": done.events, "report_keys": done.report_keys,
                                                       "versions": done.versions})

        # first after one interval: a (re)starting gateway does no extra work while it warms up
        app.state.file_history_prune = asyncio.create_task(
            periodic(rt.stopping, PRUNE_EVERY_SECONDS, once, "file history pruning", first_now=False))

    async def stop(app: Any) -> None:
        task = getattr(app.state, "file_history_prune", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    add_startup_hook(app, start)
    add_shutdown_hook(app, stop)
