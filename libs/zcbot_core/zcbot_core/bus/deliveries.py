"""Holding a JetStream work-queue delivery while it is being worked on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


async def keep_in_progress(current: Callable[[], Any], interval: float) -> None:
    """Tell JetStream every `interval` seconds that the delivery `current()` is still being worked on,
    until cancelled. `current` is read at each beat: a redelivery may replace the message. A failed
    beat (NATS reconnecting) is logged and retried: JetStream redelivers only if we stay silent."""
    while True:
        await asyncio.sleep(interval)
        try:
            await current().in_progress()
        except Exception as exc:
            log.warning("heartbeat failed", extra={"error": repr(exc)})
