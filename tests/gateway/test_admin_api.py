"""Admin API: role gate (from the DB, per request) and aggregates over inserted usage_events rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.helpers.gateway import create_task, db, set_role, set_task, user_dir
from zcbot_core import __version__
from zcbot_core.db.models import UsageEvent
from zcbot_core.platform.config import Settings
from zcbot_gateway.routes import admin as admin_routes

pytestmark = pytest.mark.asyncio

ENDPOINTS = ["/v1/admin/overview", "/v1/admin/usage/models", "/v1/admin/usage/users", "/v1/admin/storage/users"]


async def test_admin_role_gate(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "carol")
    for url in ENDPOINTS:
        assert (await app_client.get(url)).status_code == 401, url
        denied = await app_client.get(url, headers=h)
        assert denied.status_code == 403 and denied.json()["detail"] == "admin role required", url
    await set_role(app_client, "carol", "admin")  # role read per request; the change revokes older tokens
    assert (await app_client.get(ENDPOINTS[0], headers=h)).status_code == 401
    h = await make_user(app_client, "carol")
    for url in ENDPOINTS:
        assert (await app_client.get(url, headers=h)).status_code == 200, url
    await set_role(app_client, "carol", "user")
    h = await make_user(app_client, "carol")
    assert (await app_client.get(ENDPOINTS[0], headers=h)).status_code == 403


def usage(user: str, model: str | None, tin: int, tout: int, cached: int, cost: str, days_ago: float,
          run: str | None = None, **units: Any) -> UsageEvent:
    return UsageEvent(
        user_id=user, model_profile=model, run_id=run, cost=Decimal(cost),
        units={"prompt_tokens": tin, "completion_tokens": tout, "cached_tokens": cached, **units},
        created_at=datetime.now(UTC) - timedelta(days=days_ago),
    )


async def test_admin_aggregates(app_client: httpx.AsyncClient, make_user, make_admin) -> None:
    admin = await make_admin(app_client, "root", name="Root")
    await make_user(app_client, "alice", name="Alice")
    hb = await make_user(app_client, "bob")
    t1 = await create_task(app_client, hb, name="Running")
    await set_task(app_client, t1["task_id"], run_status="running")
    t2 = await create_task(app_client, hb, name="Queued")
    await set_task(app_client, t2["task_id"], run_status="queued", status="done")
    t3 = await create_task(app_client, hb, name="Trashed")
    await app_client.delete(f"/v1/tasks/{t3['task_id']}", headers=hb)
    async with db(app_client) as s:
        s.add_all([
            usage("alice", "flash", 100, 10, 5, "0.5", 0, run="r1"),
            usage("alice", "flash", 200, 20, 0, "1.0", 0, run="r1"),
            usage("alice", "pro", 1000, 100, 50, "0.25", 2, run="r2"),
            usage("bob", "pro", 50, 5, 0, "3.0", 6.5, run="r3"),
            usage("bob", "flash", 10_000, 1_000, 0, "0.1", 10, run="r4"),  # 10 days ago: in 30d, not 7d
            usage("ghost", None, 1, 1, 0, "0.001", 40, run=None),  # 40 days ago, user row gone, no profile
            # Units the runner never writes (another kind of usage): counted as 0 tokens, cost still counts.
            UsageEvent(user_id="alice", model_profile="image", kind="image", units={"images": 2, "prompt_tokens": "x"},
                       cost=Decimal("0.2"), created_at=datetime.now(UTC)),
        ])
        await s.commit()

    ov = await app_client.get("/v1/admin/overview", headers=admin)
    assert ov.status_code == 200, ov.text
    body = ov.json()
    assert body["runtime"]["version"] == __version__ and body["runtime"]["uptime_seconds"] >= 0
    assert body["runtime"]["runs"] == {"idle": 0, "waiting": 0, "queued": 1, "running": 1, "cancelling": 0,
                                       "error": 0}
    assert body["tasks"] == {"total": 2, "active": 1, "deleted": 1}
    assert body["users"] == {"total": 3, "admins": 1}
    assert body["usage"] == {"tokens_in": 11_351, "tokens_out": 1_136, "tokens_cached": 55, "tokens": 12_487,
                             "cost_usd": 5.051, "events": 7, "runs": 4}
    trend = body["trend_7d"]
    today = datetime.now(UTC).date()
    assert [d["date"] for d in trend] == [(today - timedelta(days=6 - i)).isoformat() for i in range(7)]
    assert trend[-1] == {"date": today.isoformat(), "tokens_in": 300, "tokens_out": 30, "tokens": 330,
                         "cost_usd": 1.7, "runs": 1}
    by_date = {d["date"]: d for d in trend}
    two_days = (today - timedelta(days=2)).isoformat()
    assert by_date[two_days]["tokens"] == 1100 and by_date[two_days]["runs"] == 1
    assert sum(d["cost_usd"] for d in trend) == pytest.approx(1.7 + 0.25 + (3.0 if trend[0]["runs"] else 0))

    async def get(url: str, **params: Any) -> dict[str, Any]:
        resp = await app_client.get(url, headers=admin, params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    models = await get("/v1/admin/usage/models")
    assert models["total"] == 4 and models["page"] == 1 and models["page_size"] == 20
    assert [(r["model_profile"], r["cost_usd"]) for r in models["items"]] == [
        ("pro", 3.25), ("flash", 1.6), ("image", 0.2), (None, 0.001)]
    pro = models["items"][0]
    assert (pro["tokens_in"], pro["tokens_out"], pro["tokens_cached"], pro["tokens"], pro["events"], pro["runs"]) == (
        1050, 105, 50, 1155, 2, 2)
    by_tokens = await get("/v1/admin/usage/models", sort="tokens")
    assert [r["model_profile"] for r in by_tokens["items"]] == ["flash", "pro", None, "image"]
    week = await get("/v1/admin/usage/models", range="7d", sort="tokens")
    assert [(r["model_profile"], r["tokens"]) for r in week["items"]] == [("pro", 1155), ("flash", 330), ("image", 0)]
    month = await get("/v1/admin/usage/models", range="30d")
    assert month["total"] == 3 and {r["model_profile"] for r in month["items"]} == {"pro", "flash", "image"}
    page2 = await get("/v1/admin/usage/models", page=2, page_size=3)
    assert page2["total"] == 4 and [r["model_profile"] for r in page2["items"]] == [None]
    assert (await get("/v1/admin/usage/models", page=9))["items"] == []

    users = await get("/v1/admin/usage/users")
    assert [(r["user_id"], r["cost_usd"], r["name"]) for r in users["items"]] == [
        ("bob", 3.1, None), ("alice", 1.95, "Alice"), ("ghost", 0.001, None)]
    alice = users["items"][1]
    assert (alice["tokens_in"], alice["tokens_out"], alice["events"], alice["runs"]) == (1300, 130, 4, 2)
    tokens_week = await get("/v1/admin/usage/users", range="7d", sort="tokens")
    assert [(r["user_id"], r["tokens"]) for r in tokens_week["items"]] == [("alice", 1430), ("bob", 55)]

    bad = [("/v1/admin/usage/models", {"range": "1y"}), ("/v1/admin/usage/models", {"sort": "name"}),
           ("/v1/admin/usage/users", {"range": ""}), ("/v1/admin/usage/users", {"sort": "-cost"}),
           ("/v1/admin/usage/users", {"page": 0}), ("/v1/admin/storage/users", {"page": -1}),
           ("/v1/admin/usage/models", {"page_size": 1000}), ("/v1/admin/storage/users", {"page_size": 0})]
    for url, params in bad:  # unknown or out-of-range query values: 422, never adjusted
        resp = await app_client.get(url, headers=admin, params=params)
        assert resp.status_code == 422, (url, params, resp.text)


async def test_admin_storage(app_client: httpx.AsyncClient, settings: Settings, make_user, make_admin,
                             monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    admin = await make_admin(app_client, "root")
    ha = await make_user(app_client, "alice", name="Alice A")
    await create_task(app_client, ha, name="Deck")  # an empty folder
    a = user_dir(settings, "alice")
    (a / "Deck" / "deck.pptx").write_bytes(b"x" * 1000)
    (a / ".memory").mkdir()
    (a / ".memory" / "core.md").write_bytes(b"m" * 24)
    outside = tmp_path / "big"
    outside.write_bytes(b"y" * 50_000)
    (a / "link").symlink_to(outside)  # symlinks are not followed
    b = user_dir(settings, "orphan")  # a root on disk without a user row
    b.mkdir(parents=True)
    (b / "f.txt").write_bytes(b"z" * 10)
    (settings.storage_root / "not a user id").mkdir()

    resp = await app_client.get("/v1/admin/storage/users", headers=admin)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    rows = {r["user_id"]: r for r in body["items"]}
    assert [r["user_id"] for r in body["items"]] == ["alice", "orphan", "root"]
    assert rows["alice"] == {"user_id": "alice", "email": None, "name": "Alice A", "bytes": 1024,
                             "files": 2, "dirs": 2, "partial": False}
    assert rows["orphan"]["bytes"] == 10 and rows["orphan"]["files"] == 1 and rows["orphan"]["email"] is None
    assert rows["root"]["bytes"] == 0 and rows["root"]["files"] == 0
    assert body["total"] == 3 and body["total_bytes"] == 1034 and body["total_files"] == 3 and body["partial"] is False
    page = (await app_client.get("/v1/admin/storage/users", headers=admin, params={"page": 2, "page_size": 2})).json()
    assert [r["user_id"] for r in page["items"]] == ["root"] and page["total"] == 3

    monkeypatch.setattr(admin_routes, "STORAGE_SCAN_SECONDS", 0.0)  # the time cap marks unfinished users
    capped = (await app_client.get("/v1/admin/storage/users", headers=admin)).json()
    assert capped["partial"] is True
