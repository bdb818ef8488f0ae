"""Shared fixtures of the security suite (append; other parts of the suite add theirs here)."""

from tests.e2e.conftest import bare_stack, fake_llm, stack  # noqa: F401  (fixtures: the real in-process stack)


import pytest  # noqa: E402

from tests.executor.conftest import Stack as ExecutorStack  # noqa: E402


@pytest.fixture
async def executor_one(nats_server_url: str, bus_prefix: str, tmp_path):  # type: ignore[no-untyped-def]
    """One in-process executor (host h1, real bwrap) and a client, without gateway or runner
    (named apart from the e2e `stack` imported above)."""
    s = ExecutorStack(nats_server_url, bus_prefix, tmp_path)
    await s.connect()
    try:
        await s.executor("h1")
        yield s
    finally:
        await s.close()
