"""NATS micro endpoints whose work outlives the handler, with stats that describe that work.

nats.py calls an endpoint's handler from the subscription's single delivery task, one request at a
time, and times the handler. A handler that awaited a tool call would serialise the endpoint, so
the work runs in a task of its own and the handler returns at once, which left `$SRV.STATS`
timing only that hand-off (microseconds) and never counting a failed request.

`ConcurrentEndpoints` owns that pattern: `add` registers an endpoint whose handler spawns the work
(through the service's own `spawn`, so its drain still waits for it), and `stats_handler`, given to
`add_service`, reports for each endpoint what the work did, through micro's public stats hook:
- `num_requests`: requests received; `data.in_flight`: those still running;
- `processing_time` / `average_processing_time` (ns, as micro counts): of the finished ones;
- `num_errors` / `last_error`: work that raised or returned an error text (the request failed as a
  service request: undecodable, refused while draining, killed by shutdown, an internal error; a
  tool that ran and failed is a normal answer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nats.micro.request import Request
from nats.micro.service import EndpointStats, Service

log = logging.getLogger(__name__)

#: The work of one request: returns None when it was served, else the error text it answered with.
Work = Callable[[Request], Awaitable[str | None]]
Spawn = Callable[[Coroutine[Any, Any, None]], object]


@dataclass
class EndpointWork:
    received: int = 0
    finished: int = 0
    errors: int = 0
    last_error: str = ""
    processing_ns: int = 0

    @property
    def in_flight(self) -> int:
        return self.received - self.finished


class ConcurrentEndpoints:
    def __init__(self, spawn: Spawn) -> None:
        self._spawn = spawn
        self.work: dict[str, EndpointWork] = {}

    async def add(self, service: Service, *, name: str, subject: str, queue_group: str, work: Work) -> None:
        counts = self.work.setdefault(name, EndpointWork())

        async def dispatch(request: Request) -> None:
            counts.received += 1
            self._spawn(self._run(counts, work, request))

        await service.add_endpoint(name=name, subject=subject, queue_group=queue_group, handler=dispatch)

    async def _run(self, counts: EndpointWork, work: Work, request: Request) -> None:
        started = time.perf_counter_ns()
        error: str | None
        try:
            error = await work(request)
        except Exception as exc:  # the work answers its own errors; this is a bug, counted and logged
            log.exception("endpoint work failed")
            error = repr(exc)
        finally:
            counts.finished += 1
            counts.processing_ns += time.perf_counter_ns() - started
        if error is not None:
            counts.errors += 1
            counts.last_error = error

    def stats_handler(self, stats: EndpointStats) -> dict[str, int]:
        """micro's `stats_handler`: replaces the hand-off numbers with the work's, returns `data`."""
        counts = self.work.get(stats.name)
        if counts is None:
            return {}
        stats.num_requests = counts.received
        stats.num_errors = counts.errors
        stats.last_error = counts.last_error or None
        stats.processing_time = counts.processing_ns
        stats.average_processing_time = counts.processing_ns // counts.finished if counts.finished else 0
        return {"in_flight": counts.in_flight}
