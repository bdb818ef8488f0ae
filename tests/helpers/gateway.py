"""Gateway test helpers (the fixtures that use them: tests/gateway/conftest.py).

- `running_app(settings)`: the real app (`create_app`, lifespan entered) over ASGI; `client.app` is
  the FastAPI app. App exceptions become 500 responses, as in production.
- `login` (platform-key login -> headers), `set_role`, `set_task`, `get_task_row`, `create_task`,
  `user_dir`, and `db(client)`: an async context manager giving a DB session of the app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import Task, User
from zcbot_core.platform.config import Settings
from zcbot_gateway.app import create_app

Headers = dict[str, str]


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


async def login(client: httpx.AsyncClient, user_id: str, **profile: Any) -> Headers:
    settings: Settings = client.app.state.settings  # type: ignore[attr-defined]
    resp = await client.post("/v1/auth/login", json={"user_id": user_id, "platform_key": settings.platform_key, **profile})
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"Bearer {resp.json()['token']}"}


@asynccontextmanager
async def db(client: httpx.AsyncClient) -> AsyncIterator[AsyncSession]:
    async with client.app.state.rt.sessions() as session:  # type: ignore[attr-defined]
        yield session


async def set_role(client: httpx.AsyncClient, user_id: str, role: str) -> None:
    async with db(client) as s:
        await s.execute(update(User).where(User.user_id == user_id).values(role=role))
        await s.commit()


async def set_task(client: httpx.AsyncClient, task_id: str, **values: Any) -> None:
    async with db(client) as s:
        await s.execute(update(Task).where(Task.task_id == task_id).values(**values))
        await s.commit()


async def get_task_row(client: httpx.AsyncClient, task_id: str) -> Task:
    async with db(client) as s:
        task = await s.get(Task, task_id)
        assert task is not None
        return task


async def create_task(client: httpx.AsyncClient, headers: Headers, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/tasks", headers=headers, json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def user_dir(settings: Settings, user_id: str) -> Path:
    return settings.storage_root / user_id
