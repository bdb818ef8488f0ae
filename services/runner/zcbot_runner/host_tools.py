"""Everything a run gets besides the sandbox tools: host tools, prompt blocks and after-call hooks.

Assembled per run from `zcbot_core` modules (skills, memory, schedules, push, pptx guard) so the
runner stays wiring: each concept lives once in the core.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import update

from zcbot_core import quota, safe_fs
from zcbot_core.agent.lang import say
from zcbot_core.agent.prompt import PromptContext
from zcbot_core.bus import RunRequest
from zcbot_core.bus import events as ev
from zcbot_core.channels.bindings import user_has_channel
from zcbot_core.db.models import Task
from zcbot_core.llm.profiles import get_profile
from zcbot_core.platform.config import ConfigError
from zcbot_core.platform.service import Runtime
from zcbot_core.safe_fs.paths import user_root
from zcbot_core.tools.image_gen import image_profile, register_image_gen_tool
from zcbot_core.tools.image_tool import register_image_tool
from zcbot_core.tools.pptx_guard import make_pptx_guard_hook
from zcbot_core.tools.push_tool import register_push_tool
from zcbot_core.tools.schedule_tools import register_schedule_tools
from zcbot_core.tools.skill_tools import register_skill_tools
from zcbot_core.tools.web_tools import WebTools, register_web_tools
from zcbot_core.workspace.constitution import constitution_block
from zcbot_core.workspace.memory import memory_block
from zcbot_core.workspace.skills import SkillPaths, discovery_block, registry_for_user
from zcbot_runner.config import RunnerSettings
from zcbot_runner.toolbox import RunnerToolBox

log = logging.getLogger(__name__)


class ModelSwitcher:
    """`load_skill` of a built-in skill with `model:` switches the run's model (seed 003 §3.5).

    The switch takes effect at the next LLM call (the loop reads `loop.profile` each step) and is
    persisted on the task, with a `model_switch` event. "切失败降级原模型": a profile that cannot be
    used (unknown, invalid, its API key not set) is not switched to, and the run says so in the
    user's language; a switched-to profile whose first call fails (after its retries) is switched
    back (`loop.switch_back`), persisted and announced the same way, and the step is tried again on
    the original model. Once the new model has answered, a later failure is an ordinary one.
    """

    def __init__(self, rt: Runtime, task_id: str, run_id: str, emit: Callable[[ev.RunEvent], Awaitable[None]]) -> None:
        self.rt = rt
        self.task_id = task_id
        self.run_id = run_id
        self.emit = emit
        self.loop: Any = None

    async def __call__(self, profile_name: str) -> bool:
        if self.loop is None or profile_name == self.loop.profile.name:
            return False
        try:
            profile = get_profile(self.rt.settings, profile_name)
            profile.api_key()  # MissingApiKey (a ConfigError) now rather than at the next call
        except ConfigError as exc:
            await self.emit(ev.Warn(run_id=self.run_id, msg=say(
                "model_switch_skipped_warn", self.loop.lang, profile=profile_name, detail=exc,
                current=self.loop.profile.name)))
            return False
        previous = self.loop.profile
        await self._use(profile, previous.name, "skill")

        async def switch_back(exc: BaseException) -> bool:
            if self.loop.profile is not profile:
                return False
            await self.emit(ev.Warn(run_id=self.run_id, msg=say(
                "model_switch_fallback_warn", self.loop.lang, profile=profile.name, detail=exc,
                current=previous.name)))
            await self._use(previous, profile.name, "fallback")
            return True

        self.loop.switch_back = switch_back
        return True

    async def _use(self, profile: Any, previous: str, reason: str) -> None:
        self.loop.profile = profile
        async with self.rt.sessions() as session, session.begin():
            await session.execute(update(Task).where(Task.task_id == self.task_id).values(model_profile=profile.name))
        await self.emit(ev.ModelSwitch(run_id=self.run_id, from_profile=previous, to_profile=profile.name,
                                       reason=reason))


async def extend_run(rt: Runtime, toolbox: RunnerToolBox, task: Any, req: RunRequest, prompt: PromptContext,
                     switcher: ModelSwitcher, *, settings: RunnerSettings) -> None:
    """`task`: the claimed row (`claim.Claim.task`); `settings`: the runner's (the skill paths, the
    schedules' default timezone)."""
    # The claim said whether the user has an active binding at all; only then is it checked for a usable
    # one, by a query that runs while the skills and memory are read from disk.
    has_channel = (asyncio.ensure_future(user_has_channel(rt.autocommit, task.user_id))
                   if task.user_has_active_binding else None)
    await asyncio.sleep(0)  # let it send the query before the synchronous reads below
    root = user_root(settings.storage_root, task.user_id)
    safe_fs.Root.open(root, create=True).close()
    registry = registry_for_user(root, SkillPaths.from_settings(settings))
    prompt.skills_block = discovery_block(registry)
    prompt.memory_block = memory_block(root)
    prompt.extra = constitution_block(task.task_id, task.name)
    register_skill_tools(toolbox, registry, root, on_model_switch=switcher, ledger=quota.Ledger.from_settings(settings))
    scheduled = task.scheduled_job_id is not None or req.origin == "scheduler"
    register_schedule_tools(toolbox, rt.sessions, task.user_id, task, in_scheduled_run=scheduled,
                            default_timezone=settings.zcbot_schedule_default_timezone)
    if has_channel is not None and await has_channel:
        register_push_tool(toolbox, rt.nc, rt.topo, task.user_id)
    toolbox.after_hooks.append(make_pptx_guard_hook(root, task.working_dir))


class HostToolKit:
    """`extend_run` plus the host tools that hold a client for the runner's lifetime (`web_search`,
    `web_fetch`) or need configuration (`look_at_image`, `generate_image`), each registered only when configured.
    Built once when the runner starts, from the runner's settings (a bad value stopped it there)."""

    def __init__(self, rt: Runtime, settings: RunnerSettings) -> None:
        self.host_settings = settings  # a `HostToolSettings` too
        self.web = WebTools.build(self.host_settings, rt.settings)
        if self.host_settings.vision_profile:
            get_profile(rt.settings, self.host_settings.vision_profile)  # an unknown profile: ConfigError now

    async def __call__(self, rt: Runtime, toolbox: RunnerToolBox, task: Any, req: RunRequest, prompt: PromptContext,
                       switcher: ModelSwitcher) -> None:
        settings = self.host_settings
        await extend_run(rt, toolbox, task, req, prompt, switcher, settings=settings)
        register_web_tools(toolbox, self.web, rt.sessions, storage_root=settings.storage_root,
                           ledger=quota.Ledger.from_settings(settings))
        if self.host_settings.vision_profile:
            register_image_tool(toolbox, settings, rt.sessions, profile_name=self.host_settings.vision_profile,
                                max_side=self.host_settings.vision_max_side)
        image_gen = image_profile(settings, self.host_settings.image_profile)  # read per run: a key set later counts
        if image_gen is not None:
            register_image_gen_tool(toolbox, settings, rt.sessions, profile=image_gen,
                                    cost_usd=self.host_settings.image_cost_usd, ledger=quota.Ledger.from_settings(settings))

    async def aclose(self) -> None:
        await self.web.close()
