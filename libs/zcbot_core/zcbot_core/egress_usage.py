"""The per-user egress byte count in PostgreSQL (issue 40; seed 003 §7.5 #2).

Each executor meters the bytes its users move through the egress proxy and reports them every few
seconds (`EgressUsageReport`, request/reply on `Topology.egress_usage_subject`); a runner adds
them to `egress_usage` (user, hour) and answers each user's total over the last 24 hours, every
host counted. The executor's cap (`zcbot_executor/egress/cap.py`) then decides on that total, so
N hosts no longer allow N× the cap and a restart forgets nothing. Rows older than the window are
deleted as the user's rows are written.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.bus import BusDecodeError, EgressUsageReply, EgressUsageReport, Topology, decode, encode
from zcbot_core.db.models import EgressUsage
from zcbot_core.safe_fs.paths import PathRejected, validate_user_id

log = logging.getLogger(__name__)

HOUR = 3600
WINDOW_HOURS = 24  # = zcbot_executor.egress.cap.WINDOW_SECONDS // BUCKET_SECONDS
MAX_USERS = 1000  # per report (an executor reports its active users only)
KEEP_HOURS = 2 * WINDOW_HOURS  # older rows go (nothing reads them)


def _user(value: object) -> str | None:
    try:
        return validate_user_id(value) if isinstance(value, str) else None
    except PathRejected:
        return None


async def record(sessions: async_sessionmaker[AsyncSession], report: EgressUsageReport,
                 now: float | None = None) -> EgressUsageReply:
    """Add the report's bytes; the totals of its users over the window (hours outside the window,
    from a skewed clock, are ignored)."""
    current = int((time.time() if now is None else now) // HOUR)
    first = current - WINDOW_HOURS + 1
    rows: dict[tuple[str, int], int] = {}
    for raw_user, hours in list(report.bytes.items())[:MAX_USERS]:
        user = _user(raw_user)
        if user is None or not isinstance(hours, dict):
            continue
        for raw_hour, n in hours.items():
            try:
                hour, count = int(raw_hour), int(n)
            except (TypeError, ValueError):
                continue
            if first <= hour <= current + 1 and count > 0:
                rows[(user, hour)] = rows.get((user, hour), 0) + count
    users = {u for u, _h in rows} | {u for u in map(_user, report.users[:MAX_USERS]) if u}
    if not users:
        return EgressUsageReply(window_seconds=WINDOW_HOURS * HOUR)
    async with sessions() as s, s.begin():
        if rows:
            stmt = insert(EgressUsage).values([{"user_id": u, "hour": h, "bytes": n} for (u, h), n in sorted(rows.items())])
            await s.execute(stmt.on_conflict_do_update(index_elements=[EgressUsage.user_id, EgressUsage.hour],
                                                       set_={"bytes": EgressUsage.bytes + stmt.excluded.bytes}))
            await s.execute(delete(EgressUsage).where(EgressUsage.user_id.in_({u for u, _h in rows}),
                                                      EgressUsage.hour < current - KEEP_HOURS))
        totals = dict((await s.execute(
            select(EgressUsage.user_id, func.sum(EgressUsage.bytes)).where(
                EgressUsage.user_id.in_(users), EgressUsage.hour >= first).group_by(EgressUsage.user_id))).all())
    return EgressUsageReply(totals={u: int(totals.get(u) or 0) for u in users}, window_seconds=WINDOW_HOURS * HOUR)


async def serve(nc: Any, topo: Topology, sessions: async_sessionmaker[AsyncSession]) -> Any:
    """Answer the executors' reports (the runners' queue group); the subscription."""
    async def on_report(msg: Any) -> None:
        try:
            reply = await record(sessions, decode(msg.data, EgressUsageReport))
        except BusDecodeError:
            return
        except Exception:  # no answer: the executor keeps its own count and reports again
            log.exception("egress usage not recorded")
            return
        if msg.reply:
            await msg.respond(encode(reply))

    return await nc.subscribe(topo.egress_usage_subject(), cb=on_report, queue=topo.egress_usage_queue_group)
