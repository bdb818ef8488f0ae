"""Unsafe mode (`ZCBOT_SANDBOX=unsafe`): the warm runner without any isolation.

Only for development on machines without bubblewrap or Docker, and only when an operator asks for
it explicitly; every start logs a warning. The runner still gets the env allowlist, rlimits, its
own session/process groups and the /workspace path checks of the fs tools — but shell and
run_python can read anything the executor's user can, including the network. No privilege drop
(the interpreter may not be readable by another uid), so RLIMIT_NPROC is not enforced when the
executor runs as root, and no stray-process sweep (there is no PID namespace to sweep).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import cgroups, policy
from zcbot_executor.sandbox.base import BackgroundSpec, Sandbox, SandboxBackend
from zcbot_executor.sandbox.launch import kill_background_tree, launch_detached
from zcbot_executor.sandbox.runner_conn import WarmSandbox

log = logging.getLogger(__name__)

WARNING = ("ZCBOT_SANDBOX=unsafe: tools run WITHOUT a sandbox (no filesystem, network or process isolation); "
           "never use this with untrusted users")


class UnsafeBackend(SandboxBackend):
    name = "unsafe"

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.stage: Path | None = None

    async def start(self) -> None:
        log.warning(WARNING)
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self.stage = await asyncio.to_thread(policy.stage_runner, self.config.state_dir)
        self.cgroups = await asyncio.to_thread(cgroups.for_config, self.config)

    def _config(self, user_root: Path) -> dict[str, Any]:
        tmp = policy.make_dirs_owned(user_root, ".zcbot_tmp", None)
        return {"root": str(user_root), "virtual": policy.WORKSPACE, "drop": None,
                "venv": str(user_root / ".venv") if self.config.user_venv else None,
                "limits": self.config.limits.runner_limits(), "sweep": False, "python": self.config.python,
                "tmp": str(tmp)}

    def _env(self, user_root: Path) -> dict[str, str]:
        # No egress bridge: an unsafe runner has the host's network anyway.
        return policy.sandbox_env(self.config.python, self.config.env_passthrough, home=str(user_root),
                                  tmp=str(user_root / ".zcbot_tmp"),
                                  venv=str(user_root / ".venv") if self.config.user_venv else None)

    def _cmd(self, mode: str, user_root: Path, arg: str | None = None) -> list[str]:
        assert self.stage is not None
        import json

        return policy.runner_command(self.config.python, str(self.stage), mode, json.dumps(self._config(user_root)), arg)

    async def open(self, user_id: str, user_root: Path) -> Sandbox:
        log.warning("starting an UNSANDBOXED tool runner", extra={"user_id": user_id})
        return await WarmSandbox.spawn(user_id, user_root, self._cmd("serve", user_root), self._env(user_root), "unsafe",
                                       cgroup_procs=self.cgroup_procs(user_id, cgroups.RUNNER_LEAF))

    async def start_background(self, spec: BackgroundSpec) -> dict[str, Any]:
        real_dir = str(spec.user_root) + spec.proc_dir_virtual[len(policy.WORKSPACE):]
        return await launch_detached(self._cmd("proc", spec.user_root, real_dir), self._env(spec.user_root),
                                     cgroup_procs=self.cgroup_procs(spec.user_id, spec.proc_id))

    async def kill_background(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        return await asyncio.to_thread(kill_background_tree, self, spec, private, os.path.realpath(self.config.python))
