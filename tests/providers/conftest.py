"""Recorded provider streams (`streams/*.sse`, each with its source in `*.source.md` beside it) and a
fake LLM to serve them byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.conftest import FAKE_KEY_ENV, bare_stack, fake_llm, stack  # noqa: F401  (fixtures)
from zcbot_core.testing.fake_llm import FakeLLM

STREAMS = Path(__file__).parent / "streams"


def recorded(name: str) -> bytes:
    return (STREAMS / f"{name}.sse").read_bytes()


@pytest.fixture
async def replay(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLLM]:
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-fake")
    fake = FakeLLM(strict=True)
    await fake.start()
    yield fake
    await fake.stop()
