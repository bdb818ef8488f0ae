"""Gateway auth routes and the app skeleton (error mapping, health, OpenAPI, CORS)."""

from __future__ import annotations

import time

import httpx
import jwt
import nats.errors
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import select, update

from tests.helpers.auth import bearer
from zcbot_core.accounts import auth
from zcbot_core.db.models import User
from zcbot_core.platform.config import Settings
from zcbot_core.safe_fs.paths import PathRejected
from zcbot_gateway.deps import USER_GONE, AdminUser

pytestmark = pytest.mark.asyncio


async def set_user(client: httpx.AsyncClient, user_id: str, **values: object) -> None:
    async with client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        await s.execute(update(User).where(User.user_id == user_id).values(**values))
        await s.commit()


async def get_user(client: httpx.AsyncClient, user_id: str) -> User | None:
    async with client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        return (await s.scalars(select(User).where(User.user_id == user_id))).first()



# ---- platform login ------------------------------------------------------------------------


async def test_login_creates_user_and_me(app_client: httpx.AsyncClient, settings: Settings) -> None:
    resp = await app_client.post(
        "/v1/auth/login",
        json={"user_id": "alice", "platform_key": settings.platform_key, "name": "Alice", "user_name": "al"},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["user_id"] == "alice"
    assert auth.verify_token(body["token"], settings.jwt_secret).user_id == "alice"

    me = await app_client.get("/v1/me", headers=bearer(body["token"]))
    assert me.status_code == 200, me.text
    data = me.json()
    assert set(data) == {"user_id", "email", "name", "user_name", "role", "plan", "created_at"}
    assert data["user_id"] == "alice" and data["name"] == "Alice" and data["user_name"] == "al"
    assert data["role"] == "user" and data["email"] is None and data["created_at"]


async def test_login_upsert_coalesces_profile(app_client: httpx.AsyncClient, settings: Settings) -> None:
    key = settings.platform_key
    for payload, expected in [
        ({"name": "Bob", "user_name": "bobby"}, ("Bob", "bobby")),
        ({}, ("Bob", "bobby")),  # omitted -> kept
        ({"name": None}, ("Bob", "bobby")),  # null -> kept
        ({"name": "Robert"}, ("Robert", "bobby")),  # given -> wins
    ]:
        resp = await app_client.post("/v1/auth/login", json={"user_id": "bob", "platform_key": key, **payload})
        assert resp.status_code == 200, resp.text
        user = await get_user(app_client, "bob")
        assert user is not None and (user.name, user.user_name) == expected


@pytest.mark.parametrize("key", ["wrong", "", "ключ", "x" * 4000])
async def test_login_bad_platform_key_is_403(app_client: httpx.AsyncClient, key: str) -> None:
    resp = await app_client.post("/v1/auth/login", json={"user_id": "alice", "platform_key": key})
    assert resp.status_code == 403
    assert resp.json()["detail"] == "invalid platform key"
    assert await get_user(app_client, "alice") is None


@pytest.mark.parametrize("user_id", ["", "a/b", "..", "a b", "ü", "x" * 129, "a\x00b", "../etc"])
async def test_login_bad_user_id_is_400(app_client: httpx.AsyncClient, settings: Settings, user_id: str) -> None:
    resp = await app_client.post("/v1/auth/login", json={"user_id": user_id, "platform_key": settings.platform_key})
    assert resp.status_code == 400, resp.text
    assert "user_id" in resp.json()["detail"]


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"null", b"[]", b'{"user_id": 5}', b'{"user_id": "a"}', b"\xff\xfe\x00garbage", b'{"user_id": "\xff"}'],
)
async def test_login_malformed_body_is_4xx_json(app_client: httpx.AsyncClient, content: bytes) -> None:
    resp = await app_client.post("/v1/auth/login", content=content, headers={"Content-Type": "application/json"})
    # FastAPI: 422 (validation, detail = list of errors); 400 when the body cannot even be decoded.
    assert resp.status_code in (400, 422), resp.text
    assert resp.json()["detail"]


# ---- tokens --------------------------------------------------------------------------------


async def test_bad_tokens_are_401(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    alice = await make_user(app_client, "alice")
    task_id = (await app_client.post("/v1/tasks", headers=alice, json={"name": "t"})).json()["task_id"]
    secret = settings.jwt_secret
    now = int(time.time())
    cases: dict[str, dict[str, str]] = {
        "missing": {},
        "empty bearer": {"Authorization": "Bearer "},
        "basic scheme": {"Authorization": "Basic YWxpY2U6cHc="},
        "garbage": bearer("not-a-jwt"),
        "other secret": bearer(auth.issue_token("alice", "some-other-secret-" + "x" * 32, 3600, 0)),
        "expired": bearer(auth.issue_token("alice", secret, -10, 0)),
        "alg none": bearer(jwt.encode({"sub": "alice", "iat": now, "exp": now + 60}, None, algorithm="none")),
        "no exp": bearer(jwt.encode({"sub": "alice", "iat": now}, secret, algorithm="HS256")),
        "unknown user": bearer(auth.issue_token("ghost", secret, 3600, 0)),
    }
    for label, headers in cases.items():
        # Sending a message and opening its events check the user in their own statement.
        for method, path in [("GET", "/v1/me"), ("GET", "/v1/tasks"), ("POST", "/v1/auth/change_password"),
                             ("POST", f"/v1/tasks/{task_id}/messages"), ("GET", f"/v1/tasks/{task_id}/events")]:
            resp = await app_client.request(
                method, path, headers=headers, json={"old_password": "a" * 8, "new_password": "b" * 8, "content": "hi"}
            )
            assert resp.status_code == 401, (label, path, resp.text)
            assert resp.headers.get("www-authenticate") == "Bearer", label
            assert isinstance(resp.json()["detail"], str) and resp.json()["detail"], label
    expired = await app_client.get("/v1/me", headers=cases["expired"])
    assert expired.json()["detail"] == "token expired"
    ghost = await app_client.post(f"/v1/tasks/{task_id}/messages", headers=cases["unknown user"], json={"content": "hi"})
    assert ghost.json()["detail"] == USER_GONE
    messages = await app_client.get(f"/v1/tasks/{task_id}/messages", headers=alice)
    assert messages.json()["items"] == []  # nothing was stored for the refused sends


async def test_jwt_secret_rotation_invalidates_old_tokens(
    app_client: httpx.AsyncClient, settings: Settings, start_app, make_user
) -> None:
    old_headers = await make_user(app_client, "alice")
    assert (await app_client.get("/v1/me", headers=old_headers)).status_code == 200

    rotated = settings.model_copy(update={"jwt_secret": "rotated-secret-" + "y" * 40})
    async with start_app(rotated) as client2:
        resp = await client2.get("/v1/me", headers=old_headers)
        assert resp.status_code == 401 and resp.json()["detail"] == "invalid token"
        new_headers = await make_user(client2, "alice")
        assert (await client2.get("/v1/me", headers=new_headers)).status_code == 200
    # ...and the new token means nothing to the app still on the old secret.
    assert (await app_client.get("/v1/me", headers=new_headers)).status_code == 401


# ---- password login ------------------------------------------------------------------------


async def test_login_password(app_client: httpx.AsyncClient, make_user) -> None:
    await make_user(app_client, "carol")
    await set_user(app_client, "carol", email="Carol@Example.com", password_hash=auth.hash_password("correct horse"))
    await make_user(app_client, "dave")  # a platform user without a password

    ok = await app_client.post("/v1/auth/login_password", json={"email": "carol@example.com", "password": "correct horse"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["user_id"] == "carol"
    assert (await app_client.get("/v1/me", headers=bearer(ok.json()["token"]))).json()["email"] == "Carol@Example.com"

    for email, password in [
        ("carol@example.com", "wrong password"),
        ("nobody@example.com", "correct horse"),
        ("", "correct horse"),
        ("carol@example.com", ""),
        ("dave@example.com", "anything"),
    ]:
        resp = await app_client.post("/v1/auth/login_password", json={"email": email, "password": password})
        assert resp.status_code == 403, (email, resp.text)
        assert resp.json()["detail"] == "invalid email or password"


async def test_login_password_spends_bcrypt_time_for_unknown_email(
    app_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str | None] = []
    real = auth.check_password

    def spy(password: str, hashed: str | None) -> bool:
        seen.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(auth, "check_password", spy)
    resp = await app_client.post("/v1/auth/login_password", json={"email": "nobody@example.com", "password": "pw"})
    assert resp.status_code == 403
    assert seen == [None]  # the dummy-hash path ran


async def test_change_password(app_client: httpx.AsyncClient, make_user) -> None:
    await make_user(app_client, "erin")
    await set_user(app_client, "erin", email="erin@example.com", password_hash=auth.hash_password("old-password"))
    headers = await make_user(app_client, "erin")  # setting the password revoked the first token
    url = "/v1/auth/change_password"

    wrong = await app_client.post(url, headers=headers, json={"old_password": "nope-nope", "new_password": "new-password-1"})
    assert wrong.status_code == 403 and wrong.json()["detail"] == "old password is incorrect"
    for weak in ["", "short", "x" * 7, "é" * 40]:  # too short / more than 72 bytes
        resp = await app_client.post(url, headers=headers, json={"old_password": "old-password", "new_password": weak})
        assert resp.status_code == 400, (weak, resp.text)
        assert "password must be" in resp.json()["detail"]
    missing = await app_client.post(url, headers=headers, json={"old_password": "old-password"})
    assert missing.status_code == 422

    ok = await app_client.post(url, headers=headers, json={"old_password": "old-password", "new_password": "new-password-1"})
    assert ok.status_code == 200 and ok.json() == {"ok": True}
    login = "/v1/auth/login_password"
    assert (await app_client.post(login, json={"email": "erin@example.com", "password": "old-password"})).status_code == 403
    assert (await app_client.post(login, json={"email": "erin@example.com", "password": "new-password-1"})).status_code == 200


async def test_change_password_without_a_password_is_403(app_client: httpx.AsyncClient, make_user) -> None:
    headers = await make_user(app_client, "frank")
    resp = await app_client.post(
        "/v1/auth/change_password", headers=headers, json={"old_password": "", "new_password": "new-password-1"}
    )
    assert resp.status_code == 403


# ---- admin dependency ----------------------------------------------------------------------


async def test_admin_role_is_read_from_db_each_request(app_client: httpx.AsyncClient, make_user) -> None:
    app = app_client.app  # type: ignore[attr-defined]

    @app.get("/test/admin-only")
    async def admin_only(user: AdminUser) -> dict[str, str]:
        return {"admin": user}

    headers = await make_user(app_client, "gina")
    assert (await app_client.get("/test/admin-only")).status_code == 401
    denied = await app_client.get("/test/admin-only", headers=headers)
    assert denied.status_code == 403 and denied.json()["detail"] == "admin role required"
    await set_user(app_client, "gina", role="admin")
    # A role change revokes the tokens issued before it (tests/gateway/test_auth_hardening.py).
    assert (await app_client.get("/test/admin-only", headers=headers)).status_code == 401
    headers = await make_user(app_client, "gina")
    allowed = await app_client.get("/test/admin-only", headers=headers)
    assert allowed.status_code == 200 and allowed.json() == {"admin": "gina"}
    await set_user(app_client, "gina", role="user")
    headers = await make_user(app_client, "gina")
    assert (await app_client.get("/test/admin-only", headers=headers)).status_code == 403


# ---- app skeleton --------------------------------------------------------------------------


async def test_health_openapi_docs(app_client: httpx.AsyncClient) -> None:
    assert (await app_client.get("/healthz")).json()["status"] == "ok"  # plus `zcbot up`'s instance id
    ready = await app_client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    spec = (await app_client.get("/openapi.json")).json()
    for path in ["/v1/auth/login", "/v1/auth/login_password", "/v1/auth/change_password", "/v1/me", "/v1/tasks",
                 "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/restore", "/v1/folders"]:
        assert path in spec["paths"], path
    docs = await app_client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


async def test_unknown_route_and_method_are_json(app_client: httpx.AsyncClient) -> None:
    missing = await app_client.get("/v1/nope")
    assert missing.status_code == 404 and missing.json()["detail"] == "Not Found"
    wrong = await app_client.put("/v1/folders")
    assert wrong.status_code == 405 and "detail" in wrong.json()


async def test_cors_in_local_env(app_client: httpx.AsyncClient) -> None:
    resp = await app_client.options(
        "/v1/tasks",
        headers={"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"},
    )
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == "*"


async def test_no_cors_in_production(settings: Settings, start_app) -> None:
    prod = settings.model_copy(update={"zcbot_env": "production"})
    async with start_app(prod) as client:
        resp = await client.get("/healthz", headers={"Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in resp.headers


async def test_error_mapping(app_client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    app = app_client.app  # type: ignore[attr-defined]
    boom: dict[str, BaseException] = {
        "path": PathRejected("path must not contain '..'"),
        "nats-closed": nats.errors.ConnectionClosedError(),
        "nats-noservers": nats.errors.NoServersError(),
        "nats-timeout": nats.errors.TimeoutError(),
        "db-down": sa_exc.OperationalError("select 1", {}, Exception("connection refused")),
        "db-invalidated": sa_exc.DBAPIError("select 1", {}, Exception("gone"), connection_invalidated=True),
        "db-data": sa_exc.DataError("insert", {}, Exception("value too long")),
        "bug": RuntimeError("secret internals /etc/passwd"),
    }

    @app.get("/test/raise/{kind}")
    async def raise_it(kind: str) -> None:
        raise boom[kind]

    expected = {
        "path": (400, "path must not contain '..'"),
        "nats-closed": (503, "message bus unavailable; retry shortly"),
        "nats-noservers": (503, "message bus unavailable; retry shortly"),
        "nats-timeout": (503, "message bus unavailable; retry shortly"),
        "db-down": (503, "database unavailable; retry shortly"),
        "db-invalidated": (503, "database unavailable; retry shortly"),
        "db-data": (400, "invalid value for the database (too long or malformed)"),
        "bug": (500, "internal server error"),
    }
    for kind, (code, detail) in expected.items():
        resp = await app_client.get(f"/test/raise/{kind}")
        assert resp.status_code == code, (kind, resp.text)
        assert resp.json()["detail"] == detail, kind
        if code == 503:
            assert resp.headers["retry-after"]
    assert "Traceback" not in (await app_client.get("/test/raise/bug")).text
    assert any("unhandled error" in r.getMessage() for r in caplog.records)


async def test_database_outage_is_503(settings: Settings, start_app) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = settings.model_copy(update={"zcbot_db_url": f"postgresql://postgres@127.0.0.1:{port}/nope?connect_timeout=2"})
    async with start_app(dead) as client:
        resp = await client.post("/v1/auth/login", json={"user_id": "alice", "platform_key": settings.platform_key})
        assert resp.status_code == 503, resp.text
        assert resp.json()["detail"] == "database unavailable; retry shortly"
        token = auth.issue_token("alice", settings.jwt_secret, 60, 0)
        assert (await client.get("/v1/tasks", headers=bearer(token))).status_code == 503
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["db"] is False


async def test_startup_and_shutdown_hooks(settings: Settings) -> None:
    from zcbot_gateway.app import create_app
    from zcbot_gateway.hooks import add_shutdown_hook, add_startup_hook

    app = create_app(settings)
    calls: list[str] = []

    async def first(a) -> None:
        assert a.state.rt is not None and not a.state.rt.stopping.is_set()
        calls.append("start1")

    async def second(a) -> None:
        calls.append("start2")

    async def stop_a(a) -> None:
        assert a.state.rt.stopping.is_set()
        calls.append("stopA")

    async def stop_b(a) -> None:
        calls.append("stopB")
        raise RuntimeError("a failing hook does not stop the others")

    add_startup_hook(app, first)
    add_startup_hook(app, second)
    add_shutdown_hook(app, stop_a)
    add_shutdown_hook(app, stop_b)
    async with app.router.lifespan_context(app):
        assert calls == ["start1", "start2"]
        rt = app.state.rt
    assert calls == ["start1", "start2", "stopB", "stopA"]
    assert app.state.rt is None and rt.stopping.is_set() and not rt.nc.is_connected
