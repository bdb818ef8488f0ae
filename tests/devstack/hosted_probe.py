"""A stand-in service for tests/devstack/test_hosted.py: what `ServicesHost` needs of a service's
entry module (`SETTINGS`, `serve(settings, stop)`), behaving as its own environment says."""

from __future__ import annotations

import asyncio
import logging

from pydantic import Field

from zcbot_core.config import Settings

log = logging.getLogger("tests.hosted_probe")


class ProbeSettings(Settings):
    probe_mode: str = Field(default="wait", alias="PROBE_MODE")  # wait | fail | exit | hang
    probe_port: int = Field(default=0, alias="PROBE_PORT")


SETTINGS = ProbeSettings


async def serve(settings: ProbeSettings, stop: asyncio.Event) -> None:
    log.info("probe started", extra={"port": settings.probe_port, "user": settings.zcbot_nats_user})
    log.info("my secret is %s", settings.jwt_secret)  # must come out redacted
    await asyncio.to_thread(log.info, "from a worker thread")  # to_thread keeps the service's name
    if settings.probe_mode == "fail":
        raise RuntimeError("probe failure")
    if settings.probe_mode == "exit":
        raise SystemExit(3)
    if settings.probe_mode == "hang":
        while True:  # ignores `stop`: only a kill ends it
            await asyncio.sleep(3600)
    await stop.wait()
    log.info("probe stopped")
