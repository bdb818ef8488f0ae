"""A run's host tools on real PostgreSQL: `wechat_push` is offered exactly when the user has a usable
channel binding. The claim says whether the user has an active binding at all, so a user without one
costs no query of its own; an active one is still checked for being usable."""

from __future__ import annotations

from typing import Any

import pytest

from zcbot_core.agent.prompt import PromptContext
from zcbot_core.bus import RunRequest
from zcbot_core.db.models import ChannelBinding, Task, User
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.claim import claim_run
from zcbot_runner.config import RunnerSettings
from zcbot_runner.host_tools import ModelSwitcher, extend_run
from zcbot_runner.toolbox import RunnerToolBox

BINDINGS = [
    pytest.param([], False, id="no-binding"),
    pytest.param([("wecom", "active", {"userid": "zhang", "verified_at": 1.0})], True, id="wecom"),
    pytest.param([("wecom", "active", {"userid": "zhang"})], False, id="wecom-unproven"),
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
    claim = await claim_run(rt.autocommit, req, "me")
    assert claim is not None
    assert claim.task.user_has_active_binding == any(status == "active" for _, status, _ in bindings)
    toolbox = RunnerToolBox(executor=None, sandbox_schemas=[], user_id="pusher", task_id="t-push", run_id="r-1",
                            cwd="w")
    await extend_run(rt, toolbox, claim.task, req, PromptContext(working_dir="w", task_name="t"),
                     ModelSwitcher(rt, "t-push", "r-1", emit=_ignore), settings=RunnerSettings.extend(rt.settings))
    assert ("wechat_push" in toolbox.host) == offered
    assert "load_skill" in toolbox.host  # the rest of the host tools are there either way


async def _ignore(event: Any) -> None:
    return None
