"""The domain error family (zcbot_core.errors): every class carries a code and an HTTP status, and the
gateway maps the whole family once (zcbot_gateway/errors.py) with one problem shape (RFC 9457: `detail` a string, `code`, `status`)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from zcbot_core import quota, safe_fs, schedules
from zcbot_core.accounts import auth
from zcbot_core.channels.ilink_login import LoginError
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import ConfigError
from zcbot_core.runstate import transitions as runs
from zcbot_core.safe_fs import paths
from zcbot_gateway.errors import ServiceUnavailable, install_error_handlers

# (raised error, status, detail, headers the response must carry)
CASES = [
    pytest.param(runs.TaskNotFound("t1 of u1"), 404, "task not found", {}, id="task-not-found"),
    pytest.param(runs.UserNotFound("ghost"), 401, "invalid token: user does not exist",
                 {"www-authenticate": "Bearer"}, id="user-gone"),
    pytest.param(runs.WrongChannel("wecom"), 409, "this task belongs to the wecom channel; reply there", {}, id="wrong-channel"),
    pytest.param(runs.RunConflict("a run is active"), 409, "a run is active", {}, id="run-conflict"),
    pytest.param(runs.RunQuotaExceeded("too many runs"), 429, "too many runs", {}, id="run-quota"),
    pytest.param(runs.NothingToCancel("no active run"), 409, "no active run", {}, id="nothing-to-cancel"),
    pytest.param(runs.BusUnavailable("bus down"), 503, "bus down", {}, id="bus-unavailable"),
    pytest.param(schedules.ScheduleNotFound("j1"), 404, "scheduled job not found", {}, id="schedule-not-found"),
    pytest.param(schedules.ScheduleError("bad cron"), 400, "bad cron", {}, id="schedule-invalid"),
    pytest.param(auth.AuthError("invalid token: expired"), 401, "invalid token: expired",
                 {"www-authenticate": "Bearer"}, id="auth"),
    pytest.param(auth.WeakPassword("password must be at least 8 characters"), 400,
                 "password must be at least 8 characters", {}, id="weak-password"),
    pytest.param(LoginError("二维码已过期", status_code=410), 410, "二维码已过期", {}, id="login-own-status"),
    pytest.param(quota.DiskQuotaExceeded(10, 5, 12), 507, quota.quota_message(10, 5, 12), {}, id="disk-quota"),
    pytest.param(paths.PathRejected("bad name"), 400, "bad name", {}, id="path-rejected"),
    pytest.param(paths.PathRejected(), 400, "path rejected", {}, id="path-rejected-empty"),
    pytest.param(safe_fs.NotFound("a.txt: no such file or folder"), 404, "a.txt: no such file or folder", {}, id="fs-404"),
    pytest.param(safe_fs.Conflict("a exists"), 409, "a exists", {}, id="fs-409"),
    pytest.param(safe_fs.TooLarge("too big"), 413, "too big", {}, id="fs-413"),
    pytest.param(ConfigError("X must be set"), 503, "X must be set", {"retry-after": "5"}, id="config"),
    pytest.param(ServiceUnavailable(), 503, "service temporarily unavailable; retry shortly",
                 {"retry-after": "5"}, id="service-unavailable"),
]


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{index}")
    async def _raise(index: int) -> None:
        raise CASES[index].values[0]

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_domain_errors_map_once_at_the_edge(client: TestClient, index: int) -> None:
    exc, status, detail, headers = CASES[index].values
    assert isinstance(exc, ZcbotError) and exc.code and exc.code != "error"
    resp = client.get(f"/raise/{index}")
    assert resp.status_code == status
    assert resp.json()["detail"] == detail
    assert resp.json()["code"] == exc.code and resp.json()["status"] == status  # the problem's fields
    assert resp.headers["content-type"] == "application/problem+json"
    for name, value in headers.items():
        assert resp.headers[name] == value


def test_old_names_still_hold() -> None:
    """Callers that catch the builtin bases (ValueError, LookupError, RuntimeError) keep working."""
    assert isinstance(paths.PathRejected("x"), ValueError)
    assert isinstance(schedules.ScheduleNotFound("x"), LookupError)
    assert isinstance(ConfigError("x"), RuntimeError)
    assert safe_fs.Conflict("x").status == 409 and safe_fs.SafeFsError("x").http_status == 400
    assert isinstance(runs.UserNotFound("x"), runs.TaskNotFound)


def test_an_unknown_error_is_still_a_bare_500(client: TestClient) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def _boom() -> None:
        raise KeyError("secret-ish internals")

    resp = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert resp.status_code == 500 and resp.json()["detail"] == "internal server error"
    assert "secret-ish" not in resp.text
