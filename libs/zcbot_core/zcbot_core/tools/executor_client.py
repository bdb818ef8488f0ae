"""The runner's client for sandbox tool calls: NATS request/reply to the executor service.

Routing (DESIGN §3): a user's sandbox lives on one executor host, recorded in the KV bucket
`sandbox_leases` (user_id -> host, TTL). `call` sends to that host's subject; without a lease —
or when the leased host has no responders (it died; the lease will expire) — it sends to the
unassigned subject, where any executor (queue group) takes the call and claims the lease.

Failures come back as `ToolCallReply(ok=False, error=...)`, never as exceptions:
- nobody serves the subjects -> "executor unavailable ...";
- no reply within the tool's timeout plus a margin -> "tool timed out after N s ...";
- the executor running the call goes away mid-call: while waiting, the client probes the host
  (every second for the first ten seconds, then every five; an `ExecutorProbe` on the host's
  control subject, answered by an `ExecutorProbeReply` saying whether the call still runs); two
  failed probes in a row end the wait with "executor <host> stopped during the call ...".
If the awaiting task is cancelled, a `ToolCancel` goes to the host running the call (which kills
the call's process group) before `CancelledError` propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client as NATS
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from zcbot_core.bus import (
    BackgroundStop,
    BusDecodeError,
    ExecutorProbe,
    ExecutorProbeReply,
    ToolCallReply,
    ToolCallRequest,
    ToolCancel,
    Topology,
    decode,
    encode,
    grants,
)
from zcbot_core.tools.sandbox_schemas import effective_timeout

log = logging.getLogger(__name__)

DEFAULT_MARGIN = 10.0
LEASE_CACHE_SECONDS = 1.0
# NATS can answer "no responders" for a moment after a service's subscription was made (an executor
# that has just started): measured ~1-4 % of requests sent at that moment. Only an answer that lasts
# this long means no executor is serving.
NO_RESPONDERS_GRACE_SECONDS = 0.5
NO_RESPONDERS_RETRY_SECONDS = 0.1


def _fail(req: ToolCallRequest, error: str, host: str = "") -> ToolCallReply:
    return ToolCallReply(call_id=req.call_id, ok=False, output="", error=error, meta={"executor_error": True}, host=host)


async def stop_background(nc: NATS, topo: Topology, user_id: str, task_id: str, reason: str, *,
                          grant_key: str | None, run_id: str = "") -> None:
    """Tell every executor to kill the background processes of `task_id` (except keep=true ones):
    a run was cancelled or the task deleted. Fire and forget; never raises (the caller's action
    stands either way; each process still has its time limit).

    The stop carries a grant for (`run_id`, user, task) signed with `grant_key` — the caller's
    `ZCBOT_RUN_GRANT_KEY` (the gateway and the scheduler hold it; None: an unsigned stop, which an
    executor with a key refuses) — so that no other bus identity can stop another user's processes
    (issue 22)."""
    stop = BackgroundStop(user_id=user_id, task_id=task_id, reason=reason, run_id=run_id,
                          grant=grants.issue(grant_key, run_id, user_id, task_id))
    try:
        await nc.publish(topo.exec_background_stop_subject(), encode(stop))
        await nc.flush(timeout=2)
    except Exception as exc:  # NATS down or slow: logged, the route still answers
        log.warning("could not broadcast the background stop", extra={"task_id": task_id, "error": str(exc)})


async def probe_host(nc: NATS, topo: Topology, host: str, call_id: str = "", timeout: float = 2.0) -> bool | None:
    """Is `host` serving, and is `call_id` running there?

    True: serving and (if call_id given) the call is running. False: no responders, or the call is
    unknown to it. None: no answer in time (undecided).
    """
    try:
        msg = await nc.request(topo.exec_cancel_subject(host), encode(ExecutorProbe(call_id=call_id)), timeout=timeout)
    except nats.errors.NoRespondersError:
        return False
    except (nats.errors.TimeoutError, asyncio.TimeoutError):
        return None
    try:
        reply = decode(msg.data, ExecutorProbeReply)
    except BusDecodeError:
        return None
    if not call_id:
        return True
    return reply.running


@dataclass
class _Attempt:
    host: str | None  # the host the call went to (None: the unassigned subject, host not yet known)
    direct: bool


class ExecutorClient:
    def __init__(self, nc: NATS, topo: Topology, *, margin: float = DEFAULT_MARGIN, probe_interval: float = 1.0,
                 probe_strikes: int = 2) -> None:
        self.nc = nc
        self.topo = topo
        self.margin = margin
        self.probe_interval = probe_interval
        self.probe_strikes = probe_strikes
        self._kv = None
        self._lease_cache: dict[str, tuple[float, str]] = {}

    async def _route(self, user_id: str) -> str | None:
        """Where to send a call: the lease, remembered for a moment (a stale answer only costs a
        no-responders round trip, after which the unassigned subject is used)."""
        now = time.monotonic()
        hit = self._lease_cache.get(user_id)
        if hit is not None and now - hit[0] < LEASE_CACHE_SECONDS:
            return hit[1]
        host = await self.lease_of(user_id)
        if host:
            if len(self._lease_cache) > 10_000:
                self._lease_cache.clear()
            self._lease_cache[user_id] = (now, host)
        return host

    async def lease_of(self, user_id: str) -> str | None:
        """The host holding `user_id`'s sandbox lease, if any."""
        try:
            if self._kv is None:
                self._kv = await self.nc.jetstream().key_value(self.topo.sandbox_leases_bucket)
            entry = await self._kv.get(self.topo.kv_key(user_id))
        except (KeyNotFoundError, BucketNotFoundError, NotFoundError):
            return None
        except (nats.errors.Error, asyncio.TimeoutError, ValueError) as exc:
            log.warning("lease lookup failed", extra={"user_id": user_id, "error": str(exc)})
            return None
        return entry.value.decode() if entry.value else None

    async def call(self, req: ToolCallRequest) -> ToolCallReply:
        wait = effective_timeout(req.tool, req.args, req.timeout) + self.margin
        data = encode(req)
        if len(data) > self.nc.max_payload:
            return _fail(req, f"tool call too large ({len(data)} bytes; the bus carries at most {self.nc.max_payload}): "
                              "split the content into smaller writes")
        attempt = _Attempt(host=await self._route(req.user_id), direct=True)
        try:
            if attempt.host:
                try:
                    return await self._request(self.topo.exec_call_subject(attempt.host), data, req, wait, attempt)
                except nats.errors.NoRespondersError:
                    self._lease_cache.pop(req.user_id, None)
                    log.info("leased executor not serving; trying any", extra={"host": attempt.host, "user_id": req.user_id})
            attempt.host, attempt.direct = None, False
            deadline = time.monotonic() + NO_RESPONDERS_GRACE_SECONDS
            while True:
                try:
                    return await self._request(self.topo.exec_any_subject(), data, req, wait, attempt)
                except nats.errors.NoRespondersError:
                    if time.monotonic() >= deadline:
                        return _fail(req, "executor unavailable: no executor service is serving tool calls right "
                                          "now; try again shortly")
                    await asyncio.sleep(NO_RESPONDERS_RETRY_SECONDS)
        except nats.errors.Error as exc:  # connection closed, draining, ...
            return _fail(req, f"executor unavailable: the bus connection failed ({exc.__class__.__name__})", attempt.host or "")
        except asyncio.CancelledError:
            host = attempt.host
            if host is None:
                try:
                    host = await asyncio.wait_for(self.lease_of(req.user_id), 1.0)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    host = None
            if host:
                try:
                    await asyncio.wait_for(self.cancel(req.call_id, host), 2.0)
                except (asyncio.TimeoutError, asyncio.CancelledError, nats.errors.Error):
                    pass
            raise

    async def _request(self, subject: str, data: bytes, req: ToolCallRequest, wait: float, attempt: _Attempt) -> ToolCallReply:
        fut = asyncio.ensure_future(self.nc.request(subject, data, timeout=wait))
        strikes = probes = 0
        try:
            while True:
                # probe often at first, then every few seconds: long calls should not flood the bus
                interval = self.probe_interval if probes < 10 else max(self.probe_interval, 5.0)
                probes += 1
                done, _ = await asyncio.wait({fut}, timeout=interval)
                if fut in done:
                    break
                if attempt.host is None:  # learn which executor took the call (it claims the lease)
                    attempt.host = await self.lease_of(req.user_id)
                if not attempt.host:
                    continue
                alive = await probe_host(self.nc, self.topo, attempt.host, req.call_id)
                if fut.done():
                    break
                # "unknown call" only counts when we sent to that host directly: via the unassigned
                # subject another executor may run the call while the lease names a live host.
                if alive is False and (attempt.direct or not await self._serving(attempt.host)):
                    strikes += 1
                else:
                    strikes = 0
                if strikes >= self.probe_strikes:
                    return _fail(req, f"executor {attempt.host} stopped during the call; the tool may or may not "
                                      "have run (check its effects before retrying)", attempt.host)
            msg = fut.result()
        except nats.errors.TimeoutError:
            return _fail(req, f"tool timed out after {wait:g} s waiting for the executor", attempt.host or "")
        finally:
            if not fut.done():
                fut.cancel()
        try:
            return decode(msg.data, ToolCallReply)
        except BusDecodeError as exc:
            return _fail(req, f"bad reply from the executor: {exc}", attempt.host or "")

    async def _serving(self, host: str) -> bool:
        return await probe_host(self.nc, self.topo, host) is not False

    async def cancel(self, call_id: str, host: str) -> None:
        """Ask `host` to kill call `call_id` (its whole process group). Fire and forget."""
        await self.nc.publish(self.topo.exec_cancel_subject(host), encode(ToolCancel(call_id=call_id)))
        await self.nc.flush(timeout=2)
