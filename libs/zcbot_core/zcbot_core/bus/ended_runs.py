"""Ended runs: a run's grant authorises tool calls only while its run has not ended (issue 22).

A grant (`bus/grants.py`) is checked without a round trip but is good for 48 h; its run ends long
before. So the transitions that end a run (`runstate.transitions`: the runner's end, the reapers,
a waiting run's cancel) record its id in the `ended_runs` KV bucket (`Topology.ended_runs_bucket`,
TTL `ENDED_RUNS_TTL_SECONDS` > the grant's, so the mark outlives every grant of its run), and every
executor (which holds no database) refuses a call of a run found there (`EndedRuns`).

The bucket only grows until its TTL: no identity may delete its messages and its stream refuses
purges and rollups (`bus/topology.py`), and any entry of a key - a value or a delete/purge marker
some identity published - means "ended". A run taken over by another runner is not ended (its end
is fenced on its owner), so nothing is written and its grant keeps working.

The executor's read is cheap: a watch of new marks (an ordered consumer from "now") plus an
in-process verdict per run id; a run not seen yet costs one KV read, and a "still running" verdict is
read again after `LIVE_RECHECK_SECONDS` (so a lost watch - a consumer gone with its stream's
leader - delays an end by that much at most, never forever).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError

from zcbot_core.bus.retry import retry_until
from zcbot_core.bus.subjects import Topology
from zcbot_core.bus.topology import kv_bucket

log = logging.getLogger(__name__)

MARK_RETRY_SECONDS = 10.0  # through a JetStream leader election (5-7 s)
LOOKUP_RETRY_SECONDS = 3.0
LIVE_RECHECK_SECONDS = 15.0
MAX_VERDICTS = 20_000
NO_MESSAGE_FOUND = 10037  # JetStream's "no message found" (not: no such stream)
_RETRYABLE = (NatsTimeoutError, NoRespondersError, ServiceUnavailableError, ConnectionError, asyncio.TimeoutError)


class EndedRunsUnavailable(Exception):
    """JetStream did not say whether the run ended: the executor refuses the call (fails closed)."""


async def mark_ended(js: JetStreamContext, topo: Topology, run_id: str, status: str) -> None:
    """Record that `run_id` ended (with its outcome, for an operator reading the bucket). Retried
    through an election; never raises: the run's end stands, and a mark that could not be written
    leaves the grant good until its expiry (logged as an error)."""
    if not run_id:
        return
    try:
        kv = await kv_bucket(js, topo.ended_runs_bucket)
        key = topo.kv_key(run_id)
        await retry_until(lambda _remaining: kv.put(key, status.encode()), retryable=_RETRYABLE,
                          deadline_seconds=MARK_RETRY_SECONDS, first_delay=0.1, max_delay=1.0,
                          what="ended-run mark", logger=log, extra={"run_id": run_id})
    except Exception as exc:
        log.error("could not record the end of a run; its grant stays usable until it expires",
                  extra={"run_id": run_id, "error": repr(exc)})


async def ended_status(js: JetStreamContext, topo: Topology, run_id: str) -> str | None:
    """The outcome `mark_ended` recorded for `run_id`, or None (no mark, or a marker without one)."""
    try:
        kv = await kv_bucket(js, topo.ended_runs_bucket)
        entry = await kv.get(topo.kv_key(run_id))
    except Exception:  # KeyNotFoundError / KeyDeletedError, or the bus not answering: no verdict
        return None
    return entry.value.decode() if entry is not None and entry.value else None


class EndedRuns:
    """One executor's view of the bucket: `refusal(run_id)` before every tool call."""

    def __init__(self, nc: NATS, js: JetStreamContext, topo: Topology, *,
                 recheck_seconds: float = LIVE_RECHECK_SECONDS, max_verdicts: int = MAX_VERDICTS) -> None:
        self.nc, self.js, self.topo = nc, js, topo
        self.recheck_seconds, self.max_verdicts = recheck_seconds, max_verdicts
        self.stream = f"KV_{topo.ended_runs_bucket}"
        self._prefix = f"$KV.{topo.ended_runs_bucket}."
        # run id -> None (ended: final) or the monotonic time it was last read as still running
        self._verdicts: OrderedDict[str, float | None] = OrderedDict()
        self._sub: Subscription | None = None
        self._reconnects = -1

    async def start(self) -> None:
        """Watch before the first read: an end written after a read is then always seen by the watch."""
        self._reconnects = self.nc.stats["reconnects"]
        self._sub = await self.js.subscribe(f"{self._prefix}>", stream=self.stream, cb=self._on_mark,
                                            ordered_consumer=True, deliver_policy=DeliverPolicy.NEW,
                                            headers_only=True)

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass
            self._sub = None

    async def _on_mark(self, msg: Msg) -> None:
        self._remember(msg.subject[len(self._prefix):], None)

    def _remember(self, run_id: str, verdict: float | None) -> None:
        if run_id in self._verdicts and self._verdicts[run_id] is None:
            verdict = None  # ended is final: a read answered before the watch's mark cannot undo it
        self._verdicts[run_id] = verdict
        self._verdicts.move_to_end(run_id)
        while len(self._verdicts) > self.max_verdicts:
            self._verdicts.popitem(last=False)

    async def _after_reconnect(self) -> None:
        """The watch may have missed marks while disconnected: every "running" verdict is read again,
        and the watch starts over from now."""
        self._reconnects = self.nc.stats["reconnects"]
        for run_id in [r for r, v in self._verdicts.items() if v is not None]:
            del self._verdicts[run_id]
        await self.stop()
        try:
            await self.start()
        except Exception as exc:  # JetStream not back yet: the recheck interval still bounds staleness
            log.warning("could not watch the ended runs again", extra={"error": repr(exc)})
            self._reconnects = -1

    async def has_ended(self, run_id: str) -> bool:
        """Raises EndedRunsUnavailable when JetStream does not answer."""
        if self.nc.stats["reconnects"] != self._reconnects:
            await self._after_reconnect()
        now = time.monotonic()
        if run_id in self._verdicts:
            seen = self._verdicts[run_id]
            if seen is None:
                return True
            if now - seen < self.recheck_seconds:
                return False
        try:
            ended = await retry_until(lambda _remaining: self._read(run_id), retryable=_RETRYABLE,
                                      deadline_seconds=LOOKUP_RETRY_SECONDS, first_delay=0.1, max_delay=1.0,
                                      what="ended-run lookup", logger=log, extra={"run_id": run_id})
        except Exception as exc:
            raise EndedRunsUnavailable(repr(exc)) from exc
        self._remember(run_id, None if ended else now)
        return ended or self._verdicts.get(run_id, 0.0) is None  # the watch's mark may have come meanwhile

    async def _read(self, run_id: str) -> bool:
        # The raw message, not `KeyValue.get`: a delete or purge marker is an entry too (ended).
        try:
            await self.js.get_msg(self.stream, subject=f"{self._prefix}{run_id}")
        except NotFoundError as exc:
            if exc.err_code == NO_MESSAGE_FOUND:
                return False
            raise  # the bucket itself is missing: no verdict (the call is refused)
        return True

    async def refusal(self, run_id: str) -> str | None:
        """Why a call of `run_id` is refused (its run ended, or that could not be checked), or None."""
        try:
            Topology.kv_key(run_id)
        except ValueError:
            return "the call names no run"
        try:
            if await self.has_ended(run_id):
                return "the run has ended; its grant no longer authorises tool calls"
        except EndedRunsUnavailable:
            return "could not check that the run is still active (the bus did not answer); retry the call"
        return None
