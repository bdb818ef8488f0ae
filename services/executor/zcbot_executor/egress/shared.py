"""The egress cap's shared count, executor side: this host's bytes go to a runner as an
`EgressUsageReport` (request/reply), which records them in PostgreSQL and answers every host's
totals (`zcbot_core.egress_usage`). The hub calls it (`EgressHub.share`)."""

from __future__ import annotations

from typing import Any

from zcbot_core.bus import EgressUsageReply, EgressUsageReport, Topology, decode, encode
from zcbot_executor.egress.hub import SYNC_TIMEOUT, Report


def nats_report(nc: Any, topo: Topology, host: str) -> Report:
    async def report(taken: dict[str, dict[int, int]], users: list[str]) -> dict[str, int]:
        body = EgressUsageReport(host=host, bytes={u: {str(h): n for h, n in hours.items()} for u, hours in taken.items()},
                                 users=users)
        msg = await nc.request(topo.egress_usage_subject(), encode(body), timeout=SYNC_TIMEOUT)
        return decode(msg.data, EgressUsageReply).totals

    return report
