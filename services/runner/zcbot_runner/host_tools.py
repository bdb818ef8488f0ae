"""Everything a run gets besides the sandbox tools: host tools, prompt blocks and after-call hooks.

Assembled per run from `zcbot_core` modules (skills, memory, schedules, push, pptx guard) so the
runner stays wiring: each concept lives once in the core.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import update

from zcbot_core.agent.prompt import PromptContext
from zcbot_core.bus import RunRequest
from zcbot_core.bus import events as ev
from zcbot_core.channels.bindings import user_has_channel
from zcbot_core.config import ConfigError, Settings
from zcbot_core.db.models import Task
from zcbot_core.llm.profiles import get_profile
from zcbot_core.memory import memory_block
from zcbot_core.paths import resolve_user_path, user_root
from zcbot_core.pptx_guard import make_pptx_guard_hook
from zcbot_core.service import Runtime
from zcbot_core.skills import SkillRegistry, constitution_block, discovery_block, registry_for_user
from zcbot_core.tools.push_tool import register_push_tool
from zcbot_core.tools.schedule_tools import register_schedule_tools
from zcbot_core.tools.skill_tools import register_skill_tools
from zcbot_runner.toolbox import RunnerToolBox

log = logging.getLogger(__name__)


class ModelSwitcher:
    """`load_skill` of a built-in skill with `model:` switches the run's model (seed 003 §3.5).

    The switch takes effect at the next LLM call (the loop reads `loop.profile` each step) and is
    persisted on the task; an unknown profile keeps the current model and says so.
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
        except ConfigError as exc:
            await self.emit(ev.Warn(run_id=self.run_id, msg=f"model switch skipped: {exc}"))
            return False
        previous = self.loop.profile.name
        self.loop.profile = profile
        assert self.rt.sessions is not None
        async with self.rt.sessions() as session, session.begin():
            await session.execute(update(Task).where(Task.task_id == self.task_id).values(model_profile=profile.name))
        await self.emit(ev.ModelSwitch(run_id=self.run_id, from_profile=previous, to_profile=profile.name,
                                       reason="skill"))
        return True


@dataclass
class UserFiles:
    """What a run reads of its user's folder: the skills and the memory."""

    user_id: str
    root: Path
    registry: SkillRegistry
    skills_block: str
    memory_block: str


def read_user_files(settings: Settings, user_id: str) -> UserFiles:
    root = user_root(settings.storage_root, user_id)
    root.mkdir(parents=True, exist_ok=True)
    registry = registry_for_user(root)
    return UserFiles(user_id, root, registry, discovery_block(registry), memory_block(root))


class HostTools:
    """The runner's `extend_toolbox`. `prefetch` reads the user's skills and memory from disk while the
    claim's statement is in flight (the runner calls it between sending the claim and awaiting it); the
    run's call then uses them, or reads them itself when nothing was prefetched for its user."""

    def __init__(self) -> None:
        self._prefetched: dict[str, UserFiles] = {}

    def prefetch(self, settings: Settings, req: RunRequest) -> None:
        try:
            self._prefetched[req.run_id] = read_user_files(settings, req.user_id)
        except Exception:  # the run's own call reads them again and reports what fails
            log.warning("could not read the user's files ahead of the claim", exc_info=True)

    def forget(self, run_id: str) -> None:
        self._prefetched.pop(run_id, None)

    async def __call__(self, rt: Runtime, toolbox: RunnerToolBox, task: Any, req: RunRequest, prompt: PromptContext,
                       switcher: ModelSwitcher) -> None:
        files = self._prefetched.pop(req.run_id, None)
        if files is None or files.user_id != task.user_id:  # only ever the claimed task's user's files
            files = None
        await extend_run(rt, toolbox, task, req, prompt, switcher, files)


async def extend_run(rt: Runtime, toolbox: RunnerToolBox, task: Any, req: RunRequest, prompt: PromptContext,
                     switcher: ModelSwitcher, files: UserFiles | None = None) -> None:
    """`task`: the claimed row (`claim.Claim.task`); `files`: its user's, when already read."""
    settings = rt.settings
    assert rt.sessions is not None
    # The claim said whether the user has an active binding at all; only then is it checked for a usable
    # one, by a query that runs while the skills and memory are read from disk.
    has_channel = (asyncio.ensure_future(user_has_channel(rt.reads, task.user_id))
                   if task.user_has_active_binding else None)
    if files is None:
        await asyncio.sleep(0)  # let it send the query before the synchronous reads below
        files = read_user_files(settings, task.user_id)
    root, registry = files.root, files.registry
    prompt.skills_block = files.skills_block
    prompt.memory_block = files.memory_block
    prompt.extra = constitution_block(task.task_id, task.name)
    register_skill_tools(toolbox, registry, root, on_model_switch=switcher)
    scheduled = task.scheduled_job_id is not None or req.origin == "scheduler"
    register_schedule_tools(toolbox, rt.sessions, task.user_id, task, in_scheduled_run=scheduled)
    if has_channel is not None and await has_channel:
        register_push_tool(toolbox, rt.nc, rt.topo, task.user_id)
    toolbox.after_hooks.append(make_pptx_guard_hook(resolve_user_path(root, task.working_dir)))
