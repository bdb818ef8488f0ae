"""The shared fixtures isolate tests: a database and a bus prefix of their own, cleaned up after."""

from __future__ import annotations

import sys
from pathlib import Path

import nats
import psycopg
import pytest
from nats.js.errors import NotFoundError
from sqlalchemy.engine import make_url

from zcbot_core.bus import Topology
from zcbot_core.bus.topology import ensure_topology
from zcbot_core.db.models import Base
from zcbot_core.platform.config import Settings, get_settings
from zcbot_devstack.services import SERVICE_PORT_ENV

_seen_dbs: list[str] = []
_seen_prefixes: list[str] = []


@pytest.mark.parametrize("round_", [1, 2])
def test_each_test_gets_its_own_migrated_database(db_url: str, template_db: str, round_: int) -> None:
    name = make_url(db_url).database
    assert name and name != template_db and name not in _seen_dbs
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = {r[0] for r in conn.execute("select tablename from pg_tables where schemaname = 'public'")}
        assert set(Base.metadata.tables) <= tables
        # Whatever the previous round wrote is not here.
        assert conn.execute("select count(*) from users").fetchone() == (0,)
        conn.execute("insert into users (user_id, email) values (%s, %s)", (f"u{round_}", f"u{round_}@example.com"))
        if _seen_dbs:
            exists = conn.execute("select 1 from pg_database where datname = %s", (_seen_dbs[-1],)).fetchone()
            assert exists is None, "the previous test's database must be dropped"
    _seen_dbs.append(name)


@pytest.mark.parametrize("round_", [1, 2])
async def test_each_test_gets_its_own_bus_prefix(nats_server_url: str, bus_prefix: str, round_: int) -> None:
    assert len(bus_prefix) == 9 and bus_prefix.startswith("t") and bus_prefix not in _seen_prefixes
    topo = Topology(bus_prefix)
    nc = await nats.connect(nats_server_url)
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        await js.publish(topo.event_subject("task1"), b"x")
        assert (await js.stream_info(topo.events_stream)).state.messages == 1
        await (await js.key_value(topo.cancel_bucket)).put("task1", b"1")
        if _seen_prefixes:
            previous = Topology(_seen_prefixes[-1])
            # The previous test's objects were deleted by the fixture...
            for stream in (previous.runs_stream, previous.events_stream, f"KV_{previous.cancel_bucket}"):
                with pytest.raises(NotFoundError):
                    await js.stream_info(stream)
            # ...and never shared subjects with ours.
            assert previous.event_subject("task1") != topo.event_subject("task1")
    finally:
        await nc.close()
    _seen_prefixes.append(bus_prefix)


def test_settings_follow_settings_env(settings: Settings, settings_env: dict[str, str]) -> None:
    assert settings.zcbot_db_url == settings_env["ZCBOT_DB_URL"]
    assert settings.zcbot_nats_url == settings_env["ZCBOT_NATS_URL"]
    assert settings.zcbot_bus_prefix == settings_env["ZCBOT_BUS_PREFIX"]
    assert settings.storage_root == Path(settings_env["ZCBOT_STORAGE_ROOT"]).resolve()
    ports = [settings.zcbot_http_port, settings.zcbot_runner_port, settings.zcbot_executor_port,
             settings.zcbot_scheduler_port, settings.zcbot_channels_port]  # fmt: skip
    assert len(set(ports)) == 5
    settings.require_secrets()
    assert get_settings().zcbot_db_url == settings.zcbot_db_url


STANDIN = Path(__file__).resolve().parents[1] / "helpers" / "standin_service.py"


def test_start_service_runs_and_stops_processes(start_service, settings_env: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    svc = start_service("runner", cmd=[sys.executable, str(STANDIN), "runner", SERVICE_PORT_ENV["runner"]], timeout=20)
    assert svc.alive and svc.port == int(settings_env[SERVICE_PORT_ENV["runner"]])
    assert "service started" in svc.log_text()
    assert svc.kill9() == -9 and not svc.alive
    again = start_service("runner", cmd=[sys.executable, str(STANDIN), "runner", SERVICE_PORT_ENV["runner"]], timeout=20)
    assert again.terminate(timeout=10) == 0
    assert '"msg": "stopped"' in again.log_text()
