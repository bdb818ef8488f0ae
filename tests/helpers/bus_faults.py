"""Faults of the bus seen by the submit path, for tests of what the user sees then."""

from __future__ import annotations

from typing import Any

import nats.errors
import pytest

from zcbot_core.runstate import submit


def bus_refuses_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The next run publish of the submit path fails as a JetStream outage does (after its retries)."""
    refused: list[str] = []
    real = submit.publish_run

    async def publish(js: Any, topo: Any, req: Any, **kw: Any) -> None:
        if not refused:
            refused.append(req.run_id)
            raise nats.errors.TimeoutError
        await real(js, topo, req, **kw)

    monkeypatch.setattr(submit, "publish_run", publish)
    return refused
