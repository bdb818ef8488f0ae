"""Executor test helpers: in-process executor services on the real NATS, a client, a real executor
child process, host process checks. Used by the executor and security suites (their conftests make
the fixtures)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import nats
import psutil
from nats.js.api import KeyValueConfig, StorageType

from zcbot_core.bus import ToolCallReply, ToolCallRequest, Topology, grants
from zcbot_core.bus.topology import ensure_topology
from zcbot_core.platform.service import Runtime
from zcbot_core.tools.executor_client import ExecutorClient, probe_host
from zcbot_executor.config import ExecutorConfig, ExecutorSettings
from zcbot_executor.service import ExecutorService

SANDBOX_UID = 10001
# The executors' ZCBOT_RUN_GRANT_KEY in these tests: a constant, so every executor a test starts (in
# process or as a child) and every request it grants agree.
GRANT_KEY = "tests-executor-run-grant-key-" + "0" * 35


def granted(req: ToolCallRequest, key: str = GRANT_KEY) -> ToolCallRequest:
    """`req` with the grant of its run, as the accepting service would have made it."""
    req.grant = grants.issue(key, req.run_id, req.user_id, req.task_id)
    return req


def make_settings(home: Path, storage: Path, host: str, **extra: str) -> ExecutorSettings:
    return ExecutorSettings(**{"ZCBOT_HOME": str(home), "ZCBOT_STORAGE_ROOT": str(storage), "ZCBOT_EXECUTOR_HOST": host,
                       "ZCBOT_SANDBOX": "bwrap", "ZCBOT_RUN_GRANT_KEY": GRANT_KEY, **extra})


class Stack:
    """Executors started by a test (each with its own NATS connection) plus a client."""

    def __init__(self, url: str, prefix: str, root: Path) -> None:
        self.url = url
        self.topo = Topology(prefix)
        self.root = root
        self.storage = root / "users"
        self.services: list[tuple[ExecutorService, Any]] = []
        self.nc = None
        self.client: ExecutorClient | None = None

    async def connect(self) -> None:
        self.nc = await nats.connect(self.url)
        self.client = ExecutorClient(self.nc, self.topo, margin=5.0, probe_interval=0.5)

    async def lease_bucket(self, ttl: float) -> None:
        """Create the leases bucket with a short TTL before any executor declares it."""
        js = self.nc.jetstream()
        await js.create_key_value(KeyValueConfig(bucket=self.topo.sandbox_leases_bucket, ttl=ttl, history=1,
                                                 storage=StorageType.FILE))

    async def request(self, subject: str, payload: bytes, timeout: float) -> Any:
        """A raw request to a service that has just started. NATS can answer "no responders" for a
        moment after another connection's subscription is flushed (measured here: ~1-4 % of requests
        sent at once, on both the embedded and the system server), so that answer is retried briefly,
        as `ExecutorClient` does for real callers."""
        for _ in range(20):
            try:
                return await self.nc.request(subject, payload, timeout=timeout)
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)
        return await self.nc.request(subject, payload, timeout=timeout)

    async def executor(self, host: str = "h1", env: dict[str, str] | None = None, **overrides: Any) -> ExecutorService:
        """`env`: extra settings variables; `overrides`: ExecutorConfig fields."""
        nc = await nats.connect(self.url)
        js = nc.jetstream()
        await ensure_topology(js, self.topo)
        settings = make_settings(self.root / "home", self.storage, host, **(env or {}))
        config = ExecutorConfig.from_settings(settings)
        config = replace(config, **{"idle_seconds": 30.0, "drain_grace_seconds": 5.0, **overrides})
        svc = ExecutorService(settings, config=config)
        rt = Runtime(name="executor", settings=settings, topo=self.topo, nc=nc, js=js, engine=None, sessions=None)
        await svc.start(rt)
        self.services.append((svc, nc))
        return svc

    async def crash(self, svc: ExecutorService) -> None:
        """What an executor's death looks like from outside: connection gone, leases not released."""
        for i, (s, nc) in enumerate(self.services):
            if s is svc:
                await svc.leases.stop(release=False)
                for task in svc._background:
                    task.cancel()
                svc.draining = True
                await nc.close()
                await svc.pool.close_all()
                self.services.pop(i)
                return

    async def call(self, tool: str, args: dict[str, Any], *, user: str = "u1", cwd: str = "task",
                   timeout: float = 0.0, call_id: str | None = None) -> ToolCallReply:
        req = ToolCallRequest(call_id=call_id or secrets.token_hex(6), user_id=user, task_id="t1", run_id="r1",
                              tool=tool, args=args, cwd=cwd, timeout=timeout)
        assert self.client is not None
        return await self.client.call(granted(req))

    async def shell(self, command: str, **kw: Any) -> ToolCallReply:
        return await self.call("shell", {"command": command}, **kw)

    async def close(self) -> None:
        for svc, nc in self.services:
            try:
                await asyncio.wait_for(svc.drain(), 20)
            finally:
                await nc.close()
        self.services.clear()
        if self.nc is not None:
            await self.nc.close()


def sandbox_processes(predicate: Callable[[str], bool] | None = None, *, mine_only: bool = False) -> list[psutil.Process]:
    """Host processes running as the sandbox uid, other than the warm runners themselves.

    Without a predicate only this test process's descendants count (other test sessions on the
    machine may run sandboxes too); with one, every process (background sandboxes are detached),
    unless `mine_only`.
    """
    if predicate is None or mine_only:
        try:
            candidates = psutil.Process(os.getpid()).children(recursive=True)
        except psutil.Error:
            candidates = []
    else:
        candidates = list(psutil.process_iter())
    out = []
    for p in candidates:
        try:
            if p.uids().real != SANDBOX_UID:
                continue
            cmd = " ".join(p.cmdline())
            if "import tool_runner" in cmd and " serve " in cmd:
                continue
            if predicate is None or predicate(cmd):
                out.append(p)
        except psutil.Error:
            continue
    return out


async def wait_no_processes(predicate: Callable[[str], bool] | None = None, timeout: float = 5.0, *,
                            mine_only: bool = False) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = sandbox_processes(predicate, mine_only=mine_only)
        if not left or time.monotonic() > deadline:
            return [" ".join(p.cmdline()) for p in left if p.is_running()]
        await asyncio.sleep(0.1)


async def wait_status(stack: Stack, proc_id: str, statuses: set[str], text: str = "", timeout: float = 10.0) -> ToolCallReply:
    """check_process until the background process `proc_id` is in one of `statuses` (and its output has `text`)."""
    deadline = time.monotonic() + timeout
    while True:
        r = await stack.call("check_process", {"proc_id": proc_id})
        assert r.ok, r.error
        if r.meta["status"] in statuses and text in r.output:
            return r
        assert time.monotonic() < deadline, r.output
        await asyncio.sleep(0.2)


class ExecutorProcess:
    """A real `python -m zcbot_executor` child (for environment and crash tests)."""

    def __init__(self, url: str, topo: Topology, root: Path, host: str, extra_env: dict[str, str]) -> None:
        from zcbot_devstack.embedded import free_port

        self.topo = topo
        self.host = host
        self.log = root / f"executor-{host}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZCBOT_")}
        env.update({
            "ZCBOT_NATS_URL": url, "ZCBOT_DB_URL": "postgresql+psycopg://unused@127.0.0.1:1/unused",
            "ZCBOT_BUS_PREFIX": topo.prefix, "ZCBOT_HOME": str(root / "home"), "ZCBOT_STORAGE_ROOT": str(root / "users"),
            "ZCBOT_EXECUTOR_HOST": host, "ZCBOT_EXECUTOR_PORT": str(free_port()), "ZCBOT_SANDBOX": "bwrap",
            "PYTHONUNBUFFERED": "1",  # no JWT_SECRET / PLATFORM_KEY: the executor starts without them
            "ZCBOT_RUN_GRANT_KEY": GRANT_KEY,
            **extra_env,
        })
        self.env = env
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "zcbot_executor"], env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    async def wait_ready(self, nc: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"executor exited: {self.log.read_text()[-3000:]}")
            if await probe_host(nc, self.topo, self.host, timeout=0.5):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"executor not ready: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


async def drain(stack: Stack, svc: ExecutorService) -> None:
    """Drain one executor of the stack now (as SIGTERM would) and forget it."""
    for i, (s, nc) in enumerate(stack.services):
        if s is svc:
            stack.services.pop(i)
            await svc.drain()
            await nc.close()
            return


async def wait_processes(predicate: Callable[[str], bool], count: int = 1, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(sandbox_processes(predicate)) < count:
        if time.monotonic() > deadline:
            raise AssertionError("sandbox processes did not appear")
        await asyncio.sleep(0.05)
