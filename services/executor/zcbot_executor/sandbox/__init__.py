"""Sandbox backends behind one interface (`base.SandboxBackend`), chosen by ZCBOT_SANDBOX."""

from __future__ import annotations

from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox.base import SandboxBackend


def make_backend(config: ExecutorConfig) -> SandboxBackend:
    if config.backend == "bwrap":
        from zcbot_executor.sandbox.bwrap import BwrapBackend

        return BwrapBackend(config)
    if config.backend == "docker":
        from zcbot_executor.sandbox.docker import DockerBackend

        return DockerBackend(config)
    if config.backend == "unsafe":
        from zcbot_executor.sandbox.unsafe import UnsafeBackend

        return UnsafeBackend(config)
    raise ValueError(f"unknown sandbox backend {config.backend!r} (ZCBOT_SANDBOX: bwrap, docker or unsafe)")
