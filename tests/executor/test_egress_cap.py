"""The per-user egress byte cap (ZCBOT_USER_EGRESS_MB_PER_DAY): through a real bwrap sandbox, the
real executor and its egress proxy, to a real HTTP server on 127.0.0.2 — a user under the cap
downloads; the tunnel that takes the user over the cap is closed mid-download; that user's next
connection gets the 403 naming the limit; another user is unaffected. The rolling 24-hour window
itself is checked on `ByteCap` with explicit times. The count shared across hosts and restarts
(issue 40): PostgreSQL's `egress_usage`, recorded by the runners' `zcbot_core.egress_usage.serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import func, select

from tests.executor.test_egress import FETCH, INDEX_HOST, audit, serve
from tests.helpers.executor_stack import Stack
from zcbot_core import egress_usage
from zcbot_core.bus import EgressUsageReport
from zcbot_core.db.models import EgressUsage
from zcbot_core.platform.service import Runtime
from zcbot_executor.egress.cap import BUCKET_SECONDS, WINDOW_SECONDS, ByteCap

MB = 2**20
TUNNEL = ("python - <<'EOF'\n"
          "import http.client\n"
          "for path in {paths!r}:\n"
          "    c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=20)\n"
          "    c.set_tunnel({host!r}, {port})\n"  # CONNECT, then plain HTTP inside the tunnel
          "    try:\n"
          "        c.request('GET', path)\n"
          "        r = c.getresponse()\n"
          "        print('GOT', path, r.status, len(r.read()))\n"
          "    except http.client.IncompleteRead as exc:\n"
          "        print('CUT', path, len(exc.partial))\n"
          "    except OSError as exc:\n"
          "        print('ERR', path, exc)\n"
          "EOF")


@pytest.fixture
def files(tmp_path: Path) -> Iterator[int]:
    root = tmp_path / "files"
    root.mkdir()
    (root / "small.txt").write_bytes(b"s" * 64 * 1024)
    (root / "mid.bin").write_bytes(b"m" * MB)
    (root / "big.bin").write_bytes(b"b" * 4 * MB)
    (root / "most.bin").write_bytes(b"o" * (MB + MB // 2))
    server = serve(root)
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def _capped(action: str) -> float:
    return REGISTRY.get_sample_value("zcbot_egress_capped_total", {"action": action}) or 0.0


async def test_cap_cuts_the_tunnel_then_refuses_and_other_users_are_unaffected(stack: Stack, files: int) -> None:
    port = files
    log = stack.root / "egress-audit.jsonl"
    await stack.executor("h1", egress_allow=(f"{INDEX_HOST}:{port}",), egress_audit_log=log, user_egress_mb_per_day=2)
    hub = stack.services[0][0].backend.egress
    cut_before, refused_before = _capped("cut"), _capped("refused")

    # under the cap: a download goes through
    r = await stack.shell(FETCH.format(urls=[f"http://{INDEX_HOST}:{port}/small.txt"]), timeout=60)
    assert f"GOT http://{INDEX_HOST}:{port}/small.txt sss" in r.output, r.output

    # 4 MB through a CONNECT tunnel: closed once the user's 2 MB are used up
    r = await stack.shell(TUNNEL.format(paths=["/big.bin"], host=INDEX_HOST, port=port), timeout=60)
    out = r.output.strip()
    assert out.startswith(("CUT /big.bin", "ERR /big.bin")), out
    if out.startswith("CUT"):
        assert int(out.split()[-1]) < 4 * MB, out
    assert 2 * MB <= hub.cap.used("u1") < 3 * MB  # the overshoot is at most a chunk or two
    cut_lines = [e for e in audit(log) if e["user"] == "u1" and e["cut"]]
    assert len(cut_lines) == 1 and cut_lines[0]["allowed"] and cut_lines[0]["bytes_down"] < 4 * MB, audit(log)
    assert _capped("cut") == cut_before + 1

    # over the cap: the next connections (plain and tunnel) are refused with the limit named
    r = await stack.shell(FETCH.format(urls=[f"http://{INDEX_HOST}:{port}/small.txt"]) + "\n"
                          + TUNNEL.format(paths=["/small.txt"], host=INDEX_HOST, port=port), timeout=60)
    assert f"HTTP 403 http://{INDEX_HOST}:{port}/small.txt zcbot 出站代理：已拒绝：" in r.output, r.output
    assert "上限 2 MB（ZCBOT_USER_EGRESS_MB_PER_DAY）" in r.output, r.output
    assert "ERR /small.txt Tunnel connection failed: 403 Forbidden" in r.output, r.output
    refused = [e for e in audit(log) if e["user"] == "u1" and not e["allowed"]]
    assert len(refused) == 2 and all("egress cap" in e["reason"] for e in refused), refused
    assert _capped("refused") == refused_before + 2
    assert hub.cap.over("u1")

    # another user: their own count, untouched by u1's
    r = await stack.shell(TUNNEL.format(paths=["/mid.bin"], host=INDEX_HOST, port=port), user="u2", timeout=60)
    assert r.output.strip() == f"GOT /mid.bin 200 {MB}", r.output
    assert MB < hub.cap.used("u2") < 2 * MB and not hub.cap.over("u2")


def test_the_window_rolls_by_the_hour_and_zero_is_no_cap() -> None:
    cap = ByteCap(100)
    t0 = 1_000_000 * BUCKET_SECONDS + 10.0
    assert not cap.add("u", 60, now=t0)
    assert cap.add("u", 50, now=t0 + BUCKET_SECONDS) and cap.over("u", now=t0 + BUCKET_SECONDS)
    assert not cap.over("v", now=t0)  # per user
    assert cap.used("u", now=t0 + WINDOW_SECONDS - BUCKET_SECONDS) == 110  # still in the last 24 h
    assert cap.used("u", now=t0 + WINDOW_SECONDS) == 50  # the first hour's 60 bytes rolled out
    assert not cap.over("u", now=t0 + WINDOW_SECONDS)
    assert cap.used("u", now=t0 + 2 * WINDOW_SECONDS) == 0 and "u" not in cap._buckets  # forgotten
    off = ByteCap(0)
    assert not off.add("u", 10**12) and not off.over("u") and off.used("u") == 0


async def _db_bytes(rt: Runtime, user: str) -> int:
    async with rt.sessions() as s:
        return int(await s.scalar(select(func.coalesce(func.sum(EgressUsage.bytes), 0))
                                  .where(EgressUsage.user_id == user)) or 0)


async def test_the_cap_is_shared_by_hosts_and_survives_a_restart(stack: Stack, files: int, rt: Runtime) -> None:
    """1.5 MB through host h1; h1 dies; on h2 (a restart, or another host) the same user has 0.5 MB
    left of a 2 MB cap, not a fresh 2 MB: the tunnel is cut there and the next connection refused."""
    port = files
    sub = await egress_usage.serve(rt.nc, rt.topo, rt.sessions)  # what every runner serves
    try:
        kw = {"egress_allow": (f"{INDEX_HOST}:{port}",), "user_egress_mb_per_day": 2}
        h1 = await stack.executor("h1", egress_audit_log=stack.root / "h1.jsonl", **kw)
        r = await stack.shell(TUNNEL.format(paths=["/most.bin"], host=INDEX_HOST, port=port), timeout=60)
        assert r.output.strip() == f"GOT /most.bin 200 {MB + MB // 2}", r.output
        assert await h1.backend.egress.sync([])  # what the 2-second loop does
        recorded = await _db_bytes(rt, "u1")
        assert MB + MB // 2 <= recorded < MB + MB // 2 + 64 * 1024, recorded  # the body and the headers
        await stack.crash(h1)

        h2 = await stack.executor("h2", egress_audit_log=stack.root / "h2.jsonl", **kw)
        hub = h2.backend.egress
        assert not hub.cap.known("u1")
        r = await stack.shell(TUNNEL.format(paths=["/mid.bin"], host=INDEX_HOST, port=port), timeout=60)
        out = r.output.strip()
        assert out.startswith(("CUT /mid.bin", "ERR /mid.bin")), out  # 1 MB does not fit in the 0.5 MB left
        assert hub.cap.known("u1") and hub.cap.over("u1")
        assert 2 * MB <= hub.cap.used("u1") < 3 * MB
        r = await stack.shell(TUNNEL.format(paths=["/small.txt"], host=INDEX_HOST, port=port), timeout=60)
        assert "ERR /small.txt Tunnel connection failed: 403 Forbidden" in r.output, r.output
        assert await hub.sync([])
        assert 2 * MB <= await _db_bytes(rt, "u1") < 3 * MB  # both hosts' bytes, one count
        # another user on h2 starts from their own (empty) shared count
        r = await stack.shell(TUNNEL.format(paths=["/mid.bin"], host=INDEX_HOST, port=port), user="u2", timeout=60)
        assert r.output.strip() == f"GOT /mid.bin 200 {MB}", r.output
    finally:
        await sub.unsubscribe()


async def test_recorded_usage_rolls_out_of_the_window(rt: Runtime) -> None:
    hour = 1_000_000
    now = hour * 3600 + 5.0
    old, new = str(hour - 30), str(hour)
    reply = await egress_usage.record(rt.sessions, EgressUsageReport(host="a", bytes={"w1": {new: 100, old: 7}}), now=now)
    assert reply.totals == {"w1": 100}  # an hour outside the window (a skewed clock) is not added
    reply = await egress_usage.record(rt.sessions, EgressUsageReport(host="b", bytes={"w1": {new: 50}},
                                                                     users=["w2", "../bad"]), now=now)
    assert reply.totals == {"w1": 150, "w2": 0}  # hosts add up; a bad user id is ignored
    later = now + 23 * 3600
    assert (await egress_usage.record(rt.sessions, EgressUsageReport(host="a", users=["w1"]), now=later)).totals == \
        {"w1": 150}
    assert (await egress_usage.record(rt.sessions, EgressUsageReport(host="a", users=["w1"]), now=later + 3600)).totals \
        == {"w1": 0}


def test_shared_totals_and_unreported_bytes_add_up() -> None:
    cap = ByteCap(1000)
    t = 1_000_000 * BUCKET_SECONDS + 1.0
    cap.add("u", 100, now=t)
    assert cap.used("u", now=t) == 100 and not cap.known("u")
    taken = cap.take_pending()
    assert taken == {"u": {1_000_000: 100}}
    cap.add("u", 10, now=t)  # while the report is in flight
    cap.set_totals(taken, {"u": 900})  # other hosts' 800 + this report's 100
    assert cap.known("u") and cap.used("u", now=t) == 910
    assert cap.add("u", 90, now=t) and cap.over("u", now=t)  # 1000: at the cap
    lost = cap.take_pending()
    cap.restore(lost)  # no runner answered: the bytes stay pending, still counted
    assert cap.used("u", now=t) == 1000 and cap.take_pending() == {"u": {1_000_000: 100}}
