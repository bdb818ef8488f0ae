"""Runtime without the database: one error, naming the service, wherever the database is reached."""

from __future__ import annotations

from typing import Any

import pytest

from zcbot_core.platform.config import ConfigError, Settings
from zcbot_core.platform.service import Runtime


def _runtime(settings: Settings, **db: Any) -> Runtime:
    return Runtime(name="executor", settings=settings, topo=None, nc=None, js=None,  # type: ignore[arg-type]
                   engine=db.get("engine"), sessions=db.get("sessions"))


@pytest.mark.parametrize("reach", ["engine", "sessions", "autocommit", "require_db"])
def test_a_service_opened_without_the_database_says_so(settings: Settings, reach: str) -> None:
    rt = _runtime(settings)
    assert rt.has_db is False
    with pytest.raises(ConfigError, match="the executor service needs the database"):
        value = getattr(rt, reach)
        if callable(value):
            value()


def test_with_the_database_it_is_there(settings: Settings) -> None:
    engine, sessions = object(), object()
    rt = _runtime(settings, engine=engine, sessions=sessions)
    assert rt.has_db and rt.engine is engine and rt.sessions is sessions
    rt.require_db()


async def test_healthz_answers_with_the_instance_id_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """`zcbot up` tells its own services by ZCBOT_INSTANCE_ID, read with the rest of the settings."""
    import httpx
    from fastapi import FastAPI

    from zcbot_core.platform.config import load_settings
    from zcbot_core.platform.service import health_routes

    monkeypatch.setenv("ZCBOT_INSTANCE_ID", "stack-1234")
    app = FastAPI()
    health_routes(app, lambda: None, load_settings(Settings).zcbot_instance_id)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc.test") as client:
        assert (await client.get("/healthz")).json() == {"status": "ok", "instance": "stack-1234"}
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["instance"] == "stack-1234"
