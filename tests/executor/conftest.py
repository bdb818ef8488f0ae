"""Executor fixtures: in-process executor services on the real NATS and a client (the helpers live in
tests/helpers/executor_stack.py).

Uses the root conftest's `nats_server_url` (session) and `bus_prefix` (function).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers.executor_stack import Stack


@pytest.fixture
async def stack(nats_server_url: str, bus_prefix: str, tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(nats_server_url, bus_prefix, tmp_path)
    await s.connect()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def one(stack: Stack) -> Stack:
    """A stack with one running executor (host h1)."""
    await stack.executor("h1")
    return stack
