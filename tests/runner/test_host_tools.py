"""A run's host tools on real PostgreSQL: `wechat_push` is offered exactly when the user has a usable
channel binding. The claim says whether the user has an active binding at all, so a user without one
costs no query of its own; an active one is still checked for being usable."""

from __future__ import annotations

from typing import Any

import pytest

from zcbot_core.agent.prompt import PromptContext
from zcbot_core.bus import RunRequest
from zcbot_core.db.models import ChannelBinding, Task, User
from zcbot_core.memory import CORE_FILE, MEMORY_DIR
from zcbot_core.paths import user_root
from zcbot_core.service import Runtime
from zcbot_runner.claim import claim_run
from zcbot_runner.host_tools import HostTools, ModelSwitcher, extend_run
from zcbot_runner.toolbox import RunnerToolBox

BINDINGS = [
    pytest.param([], False, id="no-binding"),
    pytest.param([("wecom", "active", {"userid": "zhang"})], True, id="wecom"),
    pytest.param([("ilink", "active", {"secrets": {"bot_token": "ciphertext"}})], True, id="ilink"),
    pytest.param([("wecom", "disabled", {"userid": "zhang"})], False, id="disabled"),
    pytest.param([("wecom", "active", {})], False, id="active-but-unconfigured"),
    pytest.param([("wecom", "disabled", {"userid": "zhang"}), ("ilink", "active", {"secrets": {"bot_token": "c"}})],
                 True, id="one-usable-of-two"),
]


@pytest.mark.parametrize(("bindings", "offered"), BINDINGS)
async def test_wechat_push_is_offered_exactly_with_a_usable_binding(rt: Runtime, bindings: list[tuple[str, str, Any]],
                                                                    offered: bool) -> None:
    async with rt.sessions() as s, s.begin():
        s.add(User(user_id="pusher"))
        s.add(User(user_id="bystander"))  # another user's binding counts for nothing here
        await s.flush()
        s.add(ChannelBinding(user_id="bystander", channel="wecom", status="active", config={"userid": "li"}))
        for channel, status, config in bindings:
            s.add(ChannelBinding(user_id="pusher", channel=channel, status=status, config=config))
        s.add(Task(task_id="t-push", user_id="pusher", name="t", working_dir="w", run_status="queued", run_id="r-1"))
    req = RunRequest(run_id="r-1", task_id="t-push", user_id="pusher", enqueued_at=0.0)
    claim = await claim_run(rt.reads, req, "me")
    assert claim is not None
    assert claim.task.user_has_active_binding == any(status == "active" for _, status, _ in bindings)
    toolbox = RunnerToolBox(executor=None, sandbox_schemas=[], user_id="pusher", task_id="t-push", run_id="r-1",
                            cwd="w")
    await extend_run(rt, toolbox, claim.task, req, PromptContext(working_dir="w", task_name="t"),
                     ModelSwitcher(rt, "t-push", "r-1", emit=_ignore))
    assert ("wechat_push" in toolbox.host) == offered
    assert "load_skill" in toolbox.host  # the rest of the host tools are there either way


async def _ignore(event: Any) -> None:
    return None


async def claimed(rt: Runtime, user_id: str, task_id: str, run_id: str) -> Any:
    async with rt.sessions() as s, s.begin():
        if await s.get(User, user_id) is None:
            s.add(User(user_id=user_id))
            await s.flush()
        s.add(Task(task_id=task_id, user_id=user_id, name="t", working_dir="w", run_status="queued", run_id=run_id))
    claim = await claim_run(rt.reads, RunRequest(run_id=run_id, task_id=task_id, user_id=user_id, enqueued_at=0.0), "me")
    assert claim is not None
    return claim.task


def remember(rt: Runtime, user_id: str, text: str) -> None:
    folder = user_root(rt.settings.storage_root, user_id) / MEMORY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CORE_FILE).write_text(text)


async def extended(rt: Runtime, host: Any, task: Any, req: RunRequest) -> tuple[PromptContext, RunnerToolBox]:
    toolbox = RunnerToolBox(executor=None, sandbox_schemas=[], user_id=task.user_id, task_id=task.task_id,
                            run_id=req.run_id, cwd="w")
    prompt = PromptContext(working_dir="w", task_name="t")
    await host(rt, toolbox, task, req, prompt, ModelSwitcher(rt, task.task_id, req.run_id, emit=_ignore))
    return prompt, toolbox


async def test_files_read_ahead_of_the_claim_give_the_same_run(rt: Runtime) -> None:
    remember(rt, "ahead", "the user likes short answers")
    task = await claimed(rt, "ahead", "t-ahead", "r-1")
    req = RunRequest(run_id="r-1", task_id="t-ahead", user_id="ahead", enqueued_at=0.0)
    host = HostTools()
    host.prefetch(rt.settings, req)
    with_prefetch = await extended(rt, host, task, req)
    without = await extended(rt, HostTools(), task, req)
    assert "the user likes short answers" in with_prefetch[0].memory_block
    for a, b in zip(with_prefetch, without):
        assert (vars(a) if isinstance(a, PromptContext) else sorted(a.host)) == \
            (vars(b) if isinstance(b, PromptContext) else sorted(b.host))
    host.forget("r-1")  # the runner's cleanup; nothing is left behind either way
    assert host._prefetched == {}  # noqa: SLF001


async def test_files_read_for_another_user_are_never_used(rt: Runtime) -> None:
    """A run request names its user; the claimed task's user is what counts. Files read ahead for
    a different user (a request that lies, or a mix-up) are dropped and the task's user's are read."""
    remember(rt, "owner", "owner's memory")
    remember(rt, "intruder", "intruder's memory")
    task = await claimed(rt, "owner", "t-owned", "r-2")
    host = HostTools()
    host.prefetch(rt.settings, RunRequest(run_id="r-2", task_id="t-owned", user_id="intruder", enqueued_at=0.0))
    prompt, _ = await extended(rt, host, task, RunRequest(run_id="r-2", task_id="t-owned", user_id="intruder",
                                                          enqueued_at=0.0))
    assert "owner's memory" in prompt.memory_block and "intruder" not in prompt.memory_block
