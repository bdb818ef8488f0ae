"""Shared fixtures of the security suite (append; other parts of the suite add theirs here)."""

import pytest  # noqa: E402

from tests.helpers.executor_stack import Stack as ExecutorStack  # noqa: E402
from tests.helpers.stack import bare_stack, fake_llm, stack  # noqa: F401  (fixtures: the real in-process stack)


@pytest.fixture
async def exec_stack(nats_server_url: str, bus_prefix: str, tmp_path):  # type: ignore[no-untyped-def]
    """Executors on the real NATS (real bwrap), started by the test with its overrides, and a client
    (named apart from the e2e `stack` imported above)."""
    s = ExecutorStack(nats_server_url, bus_prefix, tmp_path)
    await s.connect()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def executor_one(exec_stack):  # type: ignore[no-untyped-def]
    """`exec_stack` with one executor (host h1, defaults)."""
    await exec_stack.executor("h1")
    return exec_stack


from typing import Any  # noqa: E402

from tests.helpers.stack import Stack as E2EStack  # noqa: E402


async def scripted_run(stack: E2EStack, user_id: str, key: str, turns: list[dict[str, Any]],
                       task_name: str = "attack", token: str | None = None,
                       task: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One real run whose model turns are `turns` (the fake model answers the message holding
    `key`): the task and the run's SSE events until `done`."""
    stack.fake.script(key, turns)
    token = token or await stack.login(user_id)
    task = task or await stack.create_task(token, task_name)
    r = await stack.post(token, task["task_id"], f"{key} go")
    assert r.status_code == 202, r.text
    return task, await stack.events(token, r.json()["events_url"], timeout=60)
