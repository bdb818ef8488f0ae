"""Channel fixtures: fake WeCom + iLink servers, the e2e stack, the gateway with the channels
router, in-process channels-service replicas and a runner whose agent can write files.

- `fake_wecom`, `fake_ilink`: the fakes of `fakes.py`, listening on free ports.
- `chan`: a `ChannelStack` over the e2e `bare_stack` (env pointing the adapters at the fakes):
  `chan.gateway_url` (a second gateway, created after that env is set: create_app + channels router), `await chan.start_channels()` (a replica;
  several may run), `await chan.stop_channels(svc)`, `chan.user_headers(user_id)`, and a runner
  with the host tool `make_file {name, content}` (writes into the task folder) and `wechat_push`.
- `bind_wecom(client, fake, userid)`: link WeCom as a user does: the code the fake WeCom delivered
  to `userid`, typed back (`PUT /v1/channels/wecom`, then `POST /v1/channels/wecom/verify`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.channels.fakes import FakeILink, FakeWeCom
from tests.helpers.stack import Stack, bare_stack, fake_llm, stack  # noqa: F401
from zcbot_core.platform.service import Runtime, close_runtime, open_runtime, serve_http
from zcbot_core.safe_fs import paths
from zcbot_core.tools.push_tool import register_push_tool
from zcbot_core.tools.results import ToolOutcome
from zcbot_devstack.embedded import free_port


def sent_code(fake: FakeWeCom, userid: str) -> str:
    """The one-time code in the last text the app sent to `userid`."""
    found = re.search(r"\d{6}", fake.texts_to(userid)[-1])
    assert found, fake.texts_to(userid)
    return found.group()


async def bind_wecom(client: httpx.AsyncClient, fake: FakeWeCom, userid: str) -> dict[str, Any]:
    r = await client.put("/v1/channels/wecom", json={"userid": userid})
    assert r.status_code == 202, r.text
    r = await client.post("/v1/channels/wecom/verify", json={"code": sent_code(fake, userid)})
    assert r.status_code == 200, r.text
    return r.json()


MAKE_FILE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "make_file",
        "description": "Write a file into the task folder.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["name", "content"]},
    },
}


@pytest.fixture
async def fake_wecom() -> AsyncIterator[FakeWeCom]:
    fake = FakeWeCom()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def fake_ilink() -> AsyncIterator[FakeILink]:
    fake = FakeILink(hold=0.5)
    await fake.start()
    yield fake
    await fake.stop()


@dataclass
class ChannelStack:
    stack: Stack
    wecom: FakeWeCom
    ilink: FakeILink
    gateway_url: str = ""
    replicas: list[tuple[Any, Runtime]] = field(default_factory=list)
    closers: list[Any] = field(default_factory=list)

    @property
    def settings(self) -> Any:
        return self.stack.settings

    def client(self, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.gateway_url, headers=headers or {}, timeout=30)

    async def user_headers(self, user_id: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {await self.stack.login(user_id)}"}

    async def start_channels(self) -> Any:
        from zcbot_channels.service import ChannelsService

        rt = await open_runtime("channels", self.settings)
        svc = ChannelsService()
        await svc.start(rt)
        self.replicas.append((svc, rt))
        return svc

    async def stop_channels(self, svc: Any) -> None:
        for i, (s, rt) in enumerate(self.replicas):
            if s is svc:
                self.replicas.pop(i)
                await s.drain()
                await close_runtime(rt)
                return

    async def sessions(self) -> Any:
        return self.stack.runners[0][1].sessions


async def _start_gateway(settings: Any) -> tuple[str, Any, Any]:
    from zcbot_gateway.app import create_app
    from zcbot_gateway.routes import channels as channel_routes

    app = create_app(settings)
    if not any(getattr(r, "path", "") == "/v1/channels/wecom/callback" for r in app.routes):
        app.include_router(channel_routes.router)
    if channel_routes._shutdown not in app.state.on_shutdown:
        channel_routes.install(app)
    port = free_port()
    task, server = await serve_http(app, "127.0.0.1", port, lifespan="on")
    for _ in range(400):
        if getattr(server, "started", False):
            break
        await asyncio.sleep(0.025)
    return f"http://127.0.0.1:{port}", task, server


async def _add_runner(stack: Stack) -> None:
    """The agent gets `make_file` (a host tool writing into the task folder) and `wechat_push`."""
    from zcbot_runner.service import RunnerService
    from zcbot_runner.toolbox import HostTool

    rt = await open_runtime("runner", stack.settings)

    def setup(toolbox: Any, task: Any) -> None:
        folder = paths.resolve_user_path(paths.user_root(stack.settings.storage_root, task.user_id), task.working_dir)

        async def make_file(args: dict[str, Any]) -> ToolOutcome:
            target = folder / Path(str(args["name"])).name
            target.write_text(str(args["content"]))
            return ToolOutcome.make(True, f"wrote {target.name}")

        toolbox.add_host_tool(HostTool(MAKE_FILE_SCHEMA, make_file))
        register_push_tool(toolbox, rt.nc, rt.topo, task.user_id)

    async def _done() -> None:
        return None

    def extend(*args: Any) -> Any:
        # The runner calls `await extend(rt, toolbox, task, req, prompt_ctx, switcher)` (older builds:
        # `extend(toolbox, task, req, prompt_ctx)` without await).
        if len(args) >= 6:
            setup(args[1], args[2])
            return _done()
        setup(args[0], args[1])
        return None

    svc = RunnerService(lambda _rt: None, [], extend_toolbox=extend)
    await svc.start(rt)
    stack.runners.append((svc, rt))


@pytest.fixture
async def chan(bare_stack: Stack, fake_wecom: FakeWeCom, fake_ilink: FakeILink, monkeypatch: pytest.MonkeyPatch,
               caplog: pytest.LogCaptureFixture) -> AsyncIterator[ChannelStack]:
    caplog.set_level(logging.DEBUG)  # every logger that could see a channel secret, at every level
    for noisy in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):  # the LLM path carries none
        caplog.set_level(logging.WARNING, logger=noisy)
    env = {
        "ZCBOT_WECOM_CORP_ID": fake_wecom.corp_id,
        "ZCBOT_WECOM_AGENT_ID": str(fake_wecom.agent_id),
        "ZCBOT_WECOM_SECRET": fake_wecom.secret,
        "ZCBOT_WECOM_TOKEN": fake_wecom.token,
        "ZCBOT_WECOM_AES_KEY": fake_wecom.aes_key,
        "ZCBOT_WECOM_BASE_URL": fake_wecom.base_url,
        "ZCBOT_ILINK_BASE_URL": fake_ilink.base_url,
        "ZCBOT_ILINK_CDN_BASE_URL": fake_ilink.cdn_base_url,
        "ZCBOT_ILINK_POLL_TIMEOUT_SECONDS": "5",
        "ZCBOT_ILINK_SESSION_PAUSE_SECONDS": "1.5",
        "ZCBOT_CHANNELS_SCAN_SECONDS": "0.2",
        "ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS": "30",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stack = bare_stack
    await _add_runner(stack)
    url, gw_task, gw_server = await _start_gateway(stack.settings)
    cs = ChannelStack(stack=stack, wecom=fake_wecom, ilink=fake_ilink, gateway_url=url)
    try:
        yield cs
    finally:
        for svc, _rt in list(cs.replicas):
            await cs.stop_channels(svc)
        gw_server.should_exit = True
        await asyncio.wait({gw_task}, timeout=15)


FAKE_PATHS = ("/cgi-bin/", "/ilink/", "/c2c/")


def _fake_server_access_log(record: logging.LogRecord) -> bool:
    if record.name != "uvicorn.access" or not isinstance(record.args, tuple) or len(record.args) < 3:
        return False
    return str(record.args[2]).startswith(FAKE_PATHS)


def assert_no_secrets(caplog: pytest.LogCaptureFixture, secrets_: list[str]) -> None:
    """No secret value in any captured log line (message, extras or traceback)."""
    values = [s for s in secrets_ if s and len(s) >= 8]
    assert values
    for record in caplog.records:
        if _fake_server_access_log(record):
            continue  # the fake WeCom/iLink servers' own access logs: the remote side, not zcbot
        blob = f"{record.getMessage()} {record.__dict__!r} {record.exc_text or ''}"
        if record.exc_info:
            blob += logging.Formatter().formatException(record.exc_info)
        for value in values:
            assert value not in blob, f"secret leaked in a log line from {record.name}: {record.getMessage()[:200]}"
