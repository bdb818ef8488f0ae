"""The per-user egress byte cap (ZCBOT_USER_EGRESS_MB_PER_DAY): through a real bwrap sandbox, the
real executor and its egress proxy, to a real HTTP server on 127.0.0.2 — a user under the cap
downloads; the tunnel that takes the user over the cap is closed mid-download; that user's next
connection gets the 403 naming the limit; another user is unaffected. The rolling 24-hour window
itself is checked on `ByteCap` with explicit times."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tests.executor.test_egress import FETCH, INDEX_HOST, audit, serve
from tests.helpers.executor_stack import Stack
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
