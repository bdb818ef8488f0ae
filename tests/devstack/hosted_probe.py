"""A stand-in service for tests/devstack/test_hosted.py: what `ServicesHost` needs of a service's
entry module (`SETTINGS`, `serve(settings, stop)`), behaving as its own environment says."""

from __future__ import annotations

import asyncio
import logging

from pydantic import Field

from zcbot_core.platform.config import Settings
from zcbot_core.platform.logs import current_service
from zcbot_core.platform.service import Runtime, run_service
from zcbot_devstack.services import BY_NAME

log = logging.getLogger("tests.hosted_probe")

# The tasks each started probe spawned (by PROBE_TAG): the test checks they end with their service.
SPAWNED: dict[str, list[asyncio.Task[None]]] = {}


class ProbeSettings(Settings):
    # wait | fail | exit | hang | exit-in-task | service (run_service on its name's health port)
    probe_mode: str = Field(default="wait", alias="PROBE_MODE")
    probe_port: int = Field(default=0, alias="PROBE_PORT")
    probe_tag: str = Field(default="", alias="PROBE_TAG")  # set: spawn a task, which spawns another


SETTINGS = ProbeSettings


class _Impl:
    async def start(self, rt: Runtime) -> None:
        log.info("probe service started")

    async def drain(self) -> None:
        pass


async def _forever() -> None:
    await asyncio.sleep(3600)


async def _parent(tag: str, spawned: asyncio.Event) -> None:
    SPAWNED[tag].append(asyncio.create_task(_forever(), name=f"{tag}-grandchild"))
    spawned.set()
    await asyncio.sleep(3600)


async def _exit_soon() -> None:
    await asyncio.sleep(0.05)
    raise SystemExit(4)  # as a library deep in the service might (uvicorn on a port it cannot bind)


async def serve(settings: ProbeSettings, stop: asyncio.Event) -> None:
    if settings.probe_tag:
        spawned = asyncio.Event()
        tag = settings.probe_tag
        SPAWNED[tag] = [asyncio.create_task(_parent(tag, spawned), name=f"{tag}-child")]
        await spawned.wait()  # both running before the probe goes on (and maybe fails)
    if settings.probe_mode == "service":
        name = current_service.get() or "probe"
        await run_service(name, settings, _Impl, port=BY_NAME[name].port(settings), use_db=False,
                          needs_secrets=False, stop=stop)
        return
    log.info("probe started", extra={"port": settings.probe_port, "user": settings.zcbot_nats_user})
    log.info("my secret is %s", settings.jwt_secret)  # must come out redacted
    await asyncio.to_thread(log.info, "from a worker thread")  # to_thread keeps the service's name
    if settings.probe_mode == "fail":
        raise RuntimeError("probe failure")
    if settings.probe_mode == "exit":
        raise SystemExit(3)
    if settings.probe_mode == "exit-in-task":
        asyncio.create_task(_exit_soon())
    if settings.probe_mode == "hang":
        while True:  # ignores `stop`: only a kill ends it
            await asyncio.sleep(3600)
    await stop.wait()
    log.info("probe stopped")
