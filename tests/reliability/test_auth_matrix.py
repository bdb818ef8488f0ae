"""Auth matrix (issue 12 item 5): every /v1 route x every way a caller can be wrong.

`ROUTES` is the table: one row per operation of the OpenAPI document (a new route without a row
fails `test_the_table_covers_every_route`), saying how to call it (body, query) and whether it
addresses an owned resource or is admin-only. The real gateway app runs in process (lifespan
entered: real PostgreSQL + NATS) behind an ASGI client. Dimensions:

- no token / malformed / wrong scheme / bad signature / expired / `alg: none` / tampered claims /
  a user that no longer exists -> 401 with `WWW-Authenticate: Bearer`, on every route;
- another user's task, scheduled job, memory file, file or channel binding -> 404 (never 403,
  which would confirm it exists), and the owner's data is untouched afterwards;
- a non-admin on the admin routes -> 403; a demotion takes effect on the next request;
- logins: unknown email and wrong password give the same status and body; a wrong platform key is
  403; password change rules; rotating JWT_SECRET (app restarted) invalidates every old token.
Excluded by design: /healthz, /readyz, /metrics (probes), the two login routes (tested on their
own below), and the WeCom callback, which WeCom signs instead of a bearer token (fuzzed in
test_fuzz_api.py: unsigned input is 403).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest

from tests.helpers.auth import bearer
from tests.helpers.db import db_exec_async, db_rows_async
from tests.helpers.seed import seed_extended_memory, seed_schedule
from tests.reliability.conftest_shared import running_app, settings_env  # noqa: F401
from zcbot_core.accounts import auth
from zcbot_core.platform.config import Settings
from zcbot_devstack.embedded import free_port

EXTRA_ENV = {"ZCBOT_ILINK_BASE_URL": f"http://127.0.0.1:{free_port()}"}  # never WeChat's real server

EXCLUDED = {("POST", "/v1/auth/login"), ("POST", "/v1/auth/login_password")}
OWNER, OTHER, ADMIN = "alice", "bob", "root-admin"
MEMBER = "member@example.com"  # the user the admin user routes manage
OWNER_FILE = "proj/report.txt"


@dataclass(frozen=True)
class Route:
    json: Any = None
    query: dict[str, Any] = field(default_factory=dict)
    upload: bool = False
    owned: bool = False  # addresses a resource of the caller (another user's -> 404)
    admin: bool = False


ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/auth/change_password"): Route(json={"old_password": "old-password-1", "new_password": "n" * 10}),
    ("GET", "/v1/me"): Route(),
    ("GET", "/v1/me/usage"): Route(),
    ("POST", "/v1/tasks"): Route(json={"name": "fresh"}),
    ("GET", "/v1/tasks"): Route(),
    ("GET", "/v1/tasks/{task_id}"): Route(owned=True),
    ("PATCH", "/v1/tasks/{task_id}"): Route(json={"name": "hijacked"}, owned=True),
    ("DELETE", "/v1/tasks/{task_id}"): Route(owned=True),
    ("POST", "/v1/tasks/{task_id}/restore"): Route(owned=True),
    ("GET", "/v1/tasks/{task_id}/messages"): Route(owned=True),
    ("POST", "/v1/tasks/{task_id}/messages"): Route(json={"content": "hello"}, owned=True),
    ("POST", "/v1/tasks/{task_id}/messages/{idx}/resend"): Route(json={"content": "edited"}, owned=True),
    ("GET", "/v1/models"): Route(),
    ("POST", "/v1/tasks/{task_id}/cancel"): Route(owned=True),
    ("GET", "/v1/tasks/{task_id}/events"): Route(owned=True),
    ("GET", "/v1/tasks/{task_id}/export"): Route(owned=True),
    ("GET", "/v1/folders"): Route(),
    ("GET", "/v1/files"): Route(query={"path": "proj"}),
    ("GET", "/v1/files/download"): Route(query={"path": OWNER_FILE}, owned=True),
    ("GET", "/v1/files/preview"): Route(query={"path": OWNER_FILE}),  # a .txt: 415 for anyone, checked first
    ("POST", "/v1/files/upload"): Route(query={"path": "uploads"}, upload=True),
    ("POST", "/v1/files/mkdir"): Route(json={"path": "made"}),
    ("POST", "/v1/files/delete"): Route(json={"path": OWNER_FILE}, owned=True),
    ("POST", "/v1/files/rename"): Route(json={"path": OWNER_FILE, "new_name": "stolen.txt"}, owned=True),
    # File history (issue 29): another user's versions are simply not in the caller's list
    # (tests/gateway/test_file_versions.py checks the 404 on restoring one).
    ("GET", "/v1/files/versions"): Route(query={"path": OWNER_FILE}),
    ("POST", "/v1/files/restore"): Route(json={"path": OWNER_FILE, "version_id": 1}),
    ("POST", "/v1/tasks/{task_id}/runs/{run_id}/revert-files"): Route(json={}, owned=True),
    ("GET", "/v1/memory"): Route(),
    ("GET", "/v1/memory/extended/{filename}"): Route(owned=True),
    ("GET", "/v1/shortcuts"): Route(),
    ("GET", "/v1/skills"): Route(),
    ("GET", "/v1/schedules"): Route(),
    ("GET", "/v1/schedules/{job_id}"): Route(owned=True),
    ("POST", "/v1/schedules/{job_id}/disable"): Route(owned=True),
    ("DELETE", "/v1/schedules/{job_id}"): Route(owned=True),
    ("GET", "/v1/channels"): Route(),
    ("PUT", "/v1/channels/wecom"): Route(json={"userid": "someone"}),
    ("POST", "/v1/channels/wecom/verify"): Route(json={"code": "123456"}),
    ("POST", "/v1/channels/wecom/oauth"): Route(),
    ("POST", "/v1/channels/ilink/login"): Route(),
    ("GET", "/v1/channels/ilink/login"): Route(query={"wait": 0}),
    ("DELETE", "/v1/channels/{channel}"): Route(owned=True),
    # Background processes: another user's proc id is a 404 through the real executor
    # (tests/gateway/test_procs_api.py); this app has no executor, so they are not "owned" here.
    ("GET", "/v1/procs"): Route(),
    ("POST", "/v1/procs/{proc_id}/kill"): Route(),
    ("GET", "/v1/admin/overview"): Route(admin=True),
    ("GET", "/v1/admin/usage/models"): Route(admin=True),
    ("GET", "/v1/admin/usage/users"): Route(admin=True),
    ("GET", "/v1/admin/storage/users"): Route(admin=True),
    ("POST", "/v1/admin/purge"): Route(json={"older_than": "30d"}, admin=True),  # a dry run
    ("GET", "/v1/admin/orphans"): Route(admin=True),
    ("POST", "/v1/admin/orphans/delete"): Route(json={"user_id": "nobody", "path": "x", "confirm": False}, admin=True),
    # In this order for the admin's pass: created, then changed, then listed.
    ("POST", "/v1/admin/users"): Route(json={"email": MEMBER, "password": "member-secret-1"}, admin=True),
    ("PUT", "/v1/admin/users/{email}/role"): Route(json={"role": "admin"}, admin=True),
    ("PUT", "/v1/admin/users/{email}/password"): Route(json={"password": "member-secret-2"}, admin=True),
    ("POST", "/v1/admin/users/{email}/disable"): Route(admin=True),
    ("POST", "/v1/admin/users/{email}/enable"): Route(json={"password": "member-secret-3"}, admin=True),
    ("GET", "/v1/admin/users"): Route(admin=True),
    ("GET", "/v1/admin/users/{email}/budget"): Route(admin=True),
    ("PUT", "/v1/admin/users/{email}/budget"): Route(json={"daily_usd": 1.5, "monthly_usd": None}, admin=True),
}


@dataclass
class World:
    client: httpx.AsyncClient
    settings: Settings
    tokens: dict[str, str]
    params: dict[str, str]  # path parameter -> the owner's resource


async def _login(client: httpx.AsyncClient, settings: Settings, user_id: str) -> str:
    r = await client.post("/v1/auth/login", json={"user_id": user_id, "platform_key": settings.platform_key})
    assert r.status_code == 200, r.text
    return r.json()["token"]


async def _world(client: httpx.AsyncClient, settings: Settings) -> World:
    tokens = {u: await _login(client, settings, u) for u in (OWNER, OTHER, ADMIN)}
    db = settings.zcbot_db_url
    await db_exec_async(db, "update users set role = 'admin' where user_id = %s", ADMIN)
    tokens[ADMIN] = await _login(client, settings, ADMIN)  # the role change revoked the first one
    owner = bearer(tokens[OWNER])
    r = await client.post("/v1/tasks", json={"name": "proj"}, headers=owner)
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    r = await client.post("/v1/files/upload", params={"path": "proj"}, headers=owner,
                          files={"file": ("report.txt", b"alice's private report")})
    assert r.status_code == 201, r.text
    # A proven WeCom binding (the code flow itself: tests/channels/test_wecom_binding.py).
    await db_exec_async(db, "insert into channel_bindings (user_id, channel, status, config) values "
                      "(%s, 'wecom', 'active', '{\"userid\": \"alice-wecom\", \"verified_at\": 1}')", OWNER)
    job_id = await seed_schedule(db, OWNER, "daily", "brief me")
    seed_extended_memory(settings.storage_root, OWNER, "diary.md", "private", "alice's secret diary")
    params = {"task_id": task_id, "job_id": job_id, "filename": "diary.md", "channel": "wecom", "email": MEMBER,
              "proc_id": "p0123456789ab", "run_id": "run-none", "idx": "0"}
    return World(client=client, settings=settings, tokens=tokens, params=params)


async def _call(w: World, method: str, path: str, route: Route, headers: dict[str, str]) -> httpx.Response:
    url = path.format(**w.params)
    kwargs: dict[str, Any] = {"headers": headers, "params": route.query}
    if route.json is not None:
        kwargs["json"] = route.json
    if route.upload:
        kwargs["files"] = {"file": ("upload.txt", b"payload")}
    return await w.client.request(method, url, **kwargs)


@pytest.fixture
async def world(settings: Settings) -> Any:
    async with running_app(settings) as client:
        yield await _world(client, settings)


def _b64(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _bad_credentials(settings: Settings, good_token: str) -> dict[str, dict[str, str]]:
    secret = settings.jwt_secret
    now = int(time.time())
    header, payload, sig = good_token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    tampered = _b64({**claims, "sub": OTHER})
    unsigned = _b64({"sub": OWNER, "iat": now, "exp": now + 600})
    return {
        "no token": {},
        "empty bearer": {"Authorization": "Bearer "},
        "wrong scheme": {"Authorization": f"Basic {good_token}"},
        "malformed": {"Authorization": "Bearer not.a.jwt"},
        "bad signature": bearer(auth.issue_token(OWNER, "another-secret-" + "x" * 32, 3600, 0)),
        "expired": bearer(auth.issue_token(OWNER, secret, -60, 0)),
        "alg none": bearer(f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{unsigned}."),
        "tampered claims": bearer(f"{header}.{tampered}.{sig}"),
        "missing exp": bearer(jwt.encode({"sub": OWNER, "iat": now}, secret, algorithm="HS256")),
        "unknown user": bearer(auth.issue_token("ghost-user", secret, 3600, 0)),
    }


def _app_routes(routes: list[Any]) -> list[tuple[str, str, bool]]:
    """(method, path, include_in_schema) of every endpoint, through included routers."""
    out = []
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's lazily included router
        if inner is not None:
            out += _app_routes(inner.routes)
            continue
        for method in getattr(route, "methods", None) or ():
            out.append((method, getattr(route, "path", ""), bool(getattr(route, "include_in_schema", True))))
    return out


async def test_the_table_covers_every_route(world: World) -> None:
    doc = (await world.client.get("/openapi.json")).json()
    operations = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    assert not any(p in ("/healthz", "/readyz", "/metrics") for _, p in operations)
    assert operations - EXCLUDED == set(ROUTES), {
        "routes without a row": sorted(operations - EXCLUDED - set(ROUTES)),
        "rows without a route": sorted(set(ROUTES) - operations),
    }
    # Every schema operation except the logins declares the bearer scheme.
    for method, path in ROUTES:
        assert doc["paths"][path][method.lower()].get("security"), (method, path)
    # /v1 routes outside the schema are exactly the signature-authenticated WeCom callback and the
    # WeCom scan's redirect (authenticated by its one-time state, tests/channels/test_wecom_binding.py).
    routes = _app_routes(world.client.app.router.routes)  # type: ignore[attr-defined]
    hidden = {(method, path) for method, path, in_schema in routes if path.startswith("/v1") and not in_schema}
    assert hidden == {("GET", "/v1/channels/wecom/callback"), ("POST", "/v1/channels/wecom/callback"),
                      ("GET", "/v1/channels/wecom/oauth/callback")}, hidden


async def test_every_route_rejects_every_bad_credential_with_401(world: World) -> None:
    failures = []
    for label, headers in _bad_credentials(world.settings, world.tokens[OWNER]).items():
        for (method, path), route in ROUTES.items():
            r = await _call(world, method, path, route, headers)
            if r.status_code != 401 or r.headers.get("www-authenticate") != "Bearer" or "detail" not in r.json():
                failures.append(f"{label}: {method} {path} -> {r.status_code} {r.text[:120]}")
    assert failures == [], "\n".join(failures)
    # Nothing happened on the owner's behalf.
    r = await _call(world, "GET", "/v1/tasks/{task_id}", ROUTES[("GET", "/v1/tasks/{task_id}")],
                    bearer(world.tokens[OWNER]))
    assert r.status_code == 200 and r.json()["name"] == "proj" and r.json()["run_status"] == "idle"


async def test_other_users_resources_are_404_and_untouched(world: World) -> None:
    other = bearer(world.tokens[OTHER])
    failures = []
    owned = {key: route for key, route in ROUTES.items() if route.owned}
    assert len(owned) == 19
    for (method, path), route in owned.items():
        r = await _call(world, method, path, route, other)
        if r.status_code != 404:
            failures.append(f"{method} {path} -> {r.status_code} {r.text[:160]}")
    assert failures == [], "\n".join(failures)
    # The owner still has everything, unchanged (the GETs of the table succeed for the owner).
    owner = bearer(world.tokens[OWNER])
    for (method, path), route in owned.items():
        if method == "GET":
            r = await _call(world, method, path, route, owner)
            assert r.status_code == 200, (method, path, r.status_code, r.text[:200])
    task = (await world.client.get(f"/v1/tasks/{world.params['task_id']}", headers=owner)).json()
    assert task["name"] == "proj" and task["run_status"] == "idle"
    r = await world.client.get("/v1/files/download", params={"path": OWNER_FILE}, headers=owner)
    assert r.content == b"alice's private report"
    job = (await world.client.get(f"/v1/schedules/{world.params['job_id']}", headers=owner)).json()
    assert job["enabled"] is True
    channels = (await world.client.get("/v1/channels", headers=owner)).json()["items"]
    assert [c["channel"] for c in channels] == ["wecom"]
    assert await db_rows_async(world.settings.zcbot_db_url, "select count(*) from messages") == [(0,)]
    # And the other user's namespace got nothing of the owner's.
    assert not (world.settings.storage_root / OTHER / "proj").exists()


async def test_admin_routes_need_the_admin_role(world: World) -> None:
    admin_routes = {key: route for key, route in ROUTES.items() if route.admin}
    assert len(admin_routes) == 15
    for user in (OWNER, OTHER):
        for (method, path), route in admin_routes.items():
            r = await _call(world, method, path, route, bearer(world.tokens[user]))
            assert r.status_code == 403 and r.json()["detail"] == "admin role required", (user, path, r.text)
    for (method, path), route in admin_routes.items():
        r = await _call(world, method, path, route, bearer(world.tokens[ADMIN]))
        # an orphan delete without confirm=true is the admin's 400 (past the role gate), never a deletion
        expected = {("POST", "/v1/admin/users"): 201, ("POST", "/v1/admin/orphans/delete"): 400}
        assert r.status_code == expected.get((method, path), 200), (path, r.text)
    # The role is read per request, and a role change revokes the tokens issued before it: demote
    # the admin, the same token is refused at once (401), and a new one is not an admin's (403).
    await db_exec_async(world.settings.zcbot_db_url, "update users set role = 'user' where user_id = %s", ADMIN)
    r = await world.client.get("/v1/admin/overview", headers=bearer(world.tokens[ADMIN]))
    assert r.status_code == 401
    fresh = await world.client.post("/v1/auth/login", json={"user_id": ADMIN, "platform_key": world.settings.platform_key})
    r = await world.client.get("/v1/admin/overview", headers=bearer(fresh.json()["token"]))
    assert r.status_code == 403


async def _set_password(settings: Settings, user_id: str, email: str, password: str) -> None:
    await db_exec_async(settings.zcbot_db_url, "update users set email = %s, password_hash = %s where user_id = %s",
                  email, auth.hash_password(password), user_id)


async def test_login_failures_are_uniform(world: World) -> None:
    c = world.client
    await _set_password(world.settings, OWNER, "alice@example.com", "correct-horse-1")
    ok = await c.post("/v1/auth/login_password", json={"email": "Alice@Example.com", "password": "correct-horse-1"})
    assert ok.status_code == 200 and ok.json()["user_id"] == OWNER
    failures = [
        await c.post("/v1/auth/login_password", json={"email": "nobody@example.com", "password": "correct-horse-1"}),
        await c.post("/v1/auth/login_password", json={"email": "alice@example.com", "password": "wrong-horse-1"}),
        await c.post("/v1/auth/login_password", json={"email": f"{OTHER}@example.com", "password": ""}),  # no hash
        await c.post("/v1/auth/login_password", json={"email": "", "password": "correct-horse-1"}),
    ]
    assert {(r.status_code, r.json()["detail"]) for r in failures} == {(403, "invalid email or password")}
    # Platform login: a wrong or empty key is 403, a missing one is a validation error.
    for key in ("wrong-key", "", world.settings.platform_key + "x", world.settings.platform_key[:-1]):
        r = await c.post("/v1/auth/login", json={"user_id": OWNER, "platform_key": key})
        assert (r.status_code, r.json()["detail"]) == (403, "invalid platform key"), key
    r = await c.post("/v1/auth/login", json={"user_id": OWNER})
    assert r.status_code == 422
    r = await c.post("/v1/auth/login", json={"user_id": "../etc", "platform_key": world.settings.platform_key})
    assert r.status_code == 400


async def test_password_change_rules(world: World) -> None:
    c = world.client
    await _set_password(world.settings, OWNER, "alice@example.com", "old-password-1")
    signed_in = await c.post("/v1/auth/login_password", json={"email": "alice@example.com", "password": "old-password-1"})
    token = bearer(signed_in.json()["token"])  # setting the password revoked world.tokens[OWNER]

    async def change(old: str, new: str) -> httpx.Response:
        return await c.post("/v1/auth/change_password", json={"old_password": old, "new_password": new},
                            headers=token)

    r = await change("not-the-old-one", "brand-new-password")
    assert r.status_code == 403 and "old password" in r.json()["detail"]
    r = await change("old-password-1", "short")
    assert r.status_code == 400 and "at least" in r.json()["detail"]
    r = await change("old-password-1", "é" * 40)  # 80 bytes: bcrypt would silently cut it
    assert r.status_code == 400 and "72 bytes" in r.json()["detail"]
    r = await change("old-password-1", "brand-new-password")
    assert r.status_code == 200

    async def login(password: str) -> int:
        resp = await c.post("/v1/auth/login_password", json={"email": "alice@example.com", "password": password})
        return resp.status_code

    assert await login("brand-new-password") == 200
    assert await login("old-password-1") == 403
    # A user without a password (platform-only) cannot set one by guessing.
    r = await c.post("/v1/auth/change_password", json={"old_password": "", "new_password": "whatever-long"},
                     headers=bearer(world.tokens[OTHER]))
    assert r.status_code in (403, 422)


async def test_rotating_the_jwt_secret_invalidates_old_tokens(settings: Settings) -> None:
    async with running_app(settings) as client:
        old_token = await _login(client, settings, OWNER)
        assert (await client.get("/v1/me", headers=bearer(old_token))).status_code == 200
    rotated = settings.model_copy(update={"jwt_secret": "rotated-" + "s" * 40})
    async with running_app(rotated) as client:  # the gateway restarted with a new JWT_SECRET
        r = await client.get("/v1/me", headers=bearer(old_token))
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        new_token = await _login(client, rotated, OWNER)
        me = await client.get("/v1/me", headers=bearer(new_token))
        assert me.status_code == 200 and me.json()["user_id"] == OWNER
    async with running_app(settings) as client:  # and tokens of the new secret mean nothing to the old one
        assert (await client.get("/v1/me", headers=bearer(new_token))).status_code == 401
