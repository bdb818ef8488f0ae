"""The Docker backend: a long-lived hardened container per user, one `docker exec` per call.

Container (seed 003 §7.5): all capabilities dropped, no-new-privileges, read-only rootfs, tmpfs
/tmp, pids/memory/cpu limits, a non-root user, `network_mode=none`, runtime from
ZCBOT_DOCKER_RUNTIME (runc, runsc, ...), the user root bind-mounted at /workspace and the staged
runner files read-only at /opt/zcbot. Each call execs `tool_runner.py once` with the request in a
file of the user's request folder (REQUESTS_MOUNT, read-only; deleted by the executor after the call);
cancel execs `tool_runner.py kill`. The requests live outside /workspace so they are never the user's
files: in /workspace they counted against the disk quota while a call started, and a user over the
quota had the very `rm` that frees space killed for "growing" by its own request file.
Every process the executor starts in a container (the main process, each exec, a background
process container's runner) first loads the btrfs seccomp filter with a Landlock domain
(`confine.py`): no nested subvolume escapes the user's qgroup limit (issue 36), so the kernel disk
quota holds here as with bwrap. Idle containers are reaped by the pool; names and labels carry the executor host id, and a
starting executor removes its own leftovers. Background processes get a container of their own
(`zcbot-proc-<id>`, label product=proc, no instance label) so reaping and restarts never touch them.

Egress (ZCBOT_EGRESS): the user's unix socket of the host's egress proxy is bind-mounted at
`/run/zcbot/egress.sock` and the container's main process is the forwarder (`egress_forward.py`,
listening on the container's own 127.0.0.1:3128; `network_mode=none` keeps that loopback), so
pip/npm work through `HTTP(S)_PROXY` exactly as in the bwrap backend. The socket's folder is the
executor's, so here too dockerd must share the executor's filesystem.

The image (ZCBOT_DOCKER_IMAGE) needs python3 and the packages skills use: see
`services/executor/sandbox.Dockerfile`. Paths are passed to the engine as the executor sees
them, so the executor and dockerd must share the filesystem (same host, or the same volume path).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from zcbot_executor import egress
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import policy, seccomp
from zcbot_executor.sandbox.base import BackgroundSpec, Sandbox, SandboxBackend, SandboxError, ToolResult

log = logging.getLogger(__name__)

CONTAINER_PYTHON = "/usr/local/bin/python3"  # absolute: the runner posix_spawns it (no PATH search)
CALLS_DIR = "/tmp/.zcbot-calls"
REQUESTS_MOUNT = "/run/zcbot/requests"  # the user's call requests, from `DockerBackend.requests_dir`
EXEC_MARGIN = 10.0


def docker_client(timeout: float = 10.0):
    import docker

    return docker.from_env(timeout=timeout)


def engine_available() -> bool:
    try:
        client = docker_client(timeout=3.0)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


class DockerBackend(SandboxBackend):
    name = "docker"

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.client = None
        self.stage: Path | None = None
        self.env = policy.sandbox_env(CONTAINER_PYTHON, config.env_passthrough,
                                      venv=egress.SANDBOX_VENV if config.user_venv else None,
                                      extra=self.egress_env(config))
        owner = config.owner or (os.getuid(), os.getgid())
        self.user = f"{owner[0]}:{owner[1]}"
        self.confine = seccomp.program().hex()  # loaded by every process started in a container (confine.py)

    async def start(self) -> None:
        try:
            self.client = await asyncio.to_thread(docker_client)
            await asyncio.to_thread(self.client.ping)
        except Exception as exc:
            raise SandboxError(f"Docker engine not reachable ({exc.__class__.__name__}); start dockerd or choose ZCBOT_SANDBOX=bwrap") from exc
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self.stage = await asyncio.to_thread(policy.stage_runner, self.config.state_dir)
        await asyncio.to_thread(self._remove_leftovers)
        await self.start_egress(self.config)

    def _labels(self, user_id: str, product: str) -> dict[str, str]:
        labels = {"zcbot.product": product, "zcbot.user": user_id}
        if product == "sandbox":
            labels["zcbot.instance"] = self.config.host
        return labels

    def _remove_leftovers(self) -> None:
        for c in self.client.containers.list(all=True, filters={"label": ["zcbot.product=sandbox", f"zcbot.instance={self.config.host}"]}):
            log.info("removing leftover sandbox container", extra={"container": c.name})
            try:
                c.remove(force=True)
            except Exception:
                log.exception("could not remove leftover container")

    def runner_config(self) -> dict[str, Any]:
        # No RLIMIT_NPROC: every container runs as the same uid in the host's user namespace, where the
        # kernel counts that uid's processes across all containers, so one user's 256 processes stopped
        # every other user's calls (the runner could not start a thread). The container's pids limit
        # (`pids_limit`, the same number) is per container.
        limits = {k: v for k, v in self.config.limits.runner_limits().items() if k != "max_procs"}
        return {"root": policy.WORKSPACE, "virtual": policy.WORKSPACE, "drop": None, "limits": limits,
                "sweep": False, "python": CONTAINER_PYTHON, "tmp": "/tmp", "calls_dir": CALLS_DIR,
                "venv": egress.SANDBOX_VENV if self.config.user_venv else None,
                "egress": {"socket": egress.SANDBOX_SOCKET, "port": egress.SANDBOX_PORT} if self.config.egress else None,
                "nnp_set": True}  # security_opt no-new-privileges

    def main_command(self) -> list[str]:
        """The sandbox container's own process: the egress forwarder, or just a sleeper without egress."""
        guard = [CONTAINER_PYTHON, "-I", "-S", f"{policy.RUNNER_MOUNT}/confine.py", self.confine, str(int(self.kernel_quota))]
        if not self.config.egress:
            return [*guard, "sleep", "infinity"]
        return [*guard, CONTAINER_PYTHON, "-I", "-S", f"{policy.RUNNER_MOUNT}/egress_forward.py", egress.SANDBOX_SOCKET,
                str(egress.SANDBOX_PORT)]

    def command(self, mode: str, config_json: str, arg: str) -> list[str]:
        """The runner's command line in a container: confined before anything else runs (Landlock
        required with the kernel quota: without it the filter could be got round, confine.py)."""
        return policy.runner_command(CONTAINER_PYTHON, policy.RUNNER_MOUNT, mode, config_json, arg, confine=self.confine,
                                     landlock=self.kernel_quota)

    def requests_dir(self, user_id: str) -> Path:
        """The host folder of a user's call requests (the executor's, mounted read-only in the user's
        sandbox container only; 0711: the sandbox opens its request by name, lists nothing)."""
        return self.config.state_dir / "docker-requests" / user_id

    def _run_kwargs(self, user_id: str, user_root: Path, product: str, egress_socket: Path | None = None,
                    requests: Path | None = None) -> dict[str, Any]:
        import docker

        lim = self.config.limits
        cpus = self.config.docker_cpus
        return dict(
            detach=True, labels=self._labels(user_id, product), user=self.user, working_dir=policy.WORKSPACE,
            environment=self.env, cap_drop=["ALL"], security_opt=["no-new-privileges:true"], read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={lim.tmp_mb}m,mode=1777"}, pids_limit=lim.max_procs,
            mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m", nano_cpus=int(cpus * 1e9),
            network_mode="none", runtime=self.config.docker_runtime, init=True, shm_size="64m",
            volumes={str(user_root): {"bind": policy.WORKSPACE, "mode": "rw"},
                     str(self.stage): {"bind": policy.RUNNER_MOUNT, "mode": "ro"},
                     **{src: {"bind": dest, "mode": "ro"} for src, dest in policy.platform_mounts(self.config.skill_paths)},
                     **({str(egress_socket): {"bind": egress.SANDBOX_SOCKET, "mode": "rw"}} if egress_socket else {}),
                     **({str(requests): {"bind": REQUESTS_MOUNT, "mode": "ro"}} if requests else {})},
            ulimits=[docker.types.Ulimit(name="fsize", soft=lim.max_file_mb * 1024 * 1024, hard=lim.max_file_mb * 1024 * 1024),
                     docker.types.Ulimit(name="nofile", soft=lim.max_open_files, hard=lim.max_open_files)],
        )

    def container_name(self, user_id: str) -> str:
        return f"zcbot-sbx-{self.config.host}-{user_id}"

    def _open_sync(self, user_id: str, user_root: Path, egress_socket: Path | None):
        import docker

        policy.ensure_owned(user_root, self.config.owner, recursive=True)
        requests = self.requests_dir(user_id)
        requests.mkdir(mode=0o711, parents=True, exist_ok=True)
        requests.chmod(0o711)
        name = self.container_name(user_id)
        try:
            self.client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
        return self.client.containers.run(self.config.docker_image, self.main_command(), name=name,
                                          **self._run_kwargs(user_id, user_root, "sandbox", egress_socket, requests))

    async def open(self, user_id: str, user_root: Path) -> Sandbox:
        try:
            sock = await self.egress_socket(user_id)
            container = await asyncio.to_thread(self._open_sync, user_id, user_root, sock)
        except Exception as exc:
            raise SandboxError(f"could not start the sandbox container: {exc}") from exc
        log.info("sandbox container started", extra={"user_id": user_id, "container": container.name})
        return DockerSandbox(self, user_id, user_root, container)

    async def start_background(self, spec: BackgroundSpec) -> dict[str, Any]:
        name = f"zcbot-proc-{spec.proc_id}"
        cmd = self.command("proc", json.dumps(self.runner_config()), spec.proc_dir_virtual)
        kwargs = self._run_kwargs(spec.user_id, spec.user_root, "proc", await self.egress_socket(spec.user_id))
        kwargs["auto_remove"] = True
        await asyncio.to_thread(self.client.containers.run, self.config.docker_image, cmd, name=name, **kwargs)
        return {"container": name}

    async def kill_background(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        def kill() -> bool:
            try:
                self.client.containers.get(private["container"]).kill()
                return True
            except Exception:
                return False

        return await asyncio.to_thread(kill)

    def background_alive(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        """The container's state, from the engine (blocking; background/watch.py calls it in a thread)."""
        try:
            return self.client.containers.get(private["container"]).status in ("created", "running", "paused", "restarting")
        except Exception:  # gone (auto_remove), or the engine does not answer: nothing to enforce on
            return False

    async def close(self) -> None:
        await super().close()  # the egress hub
        if self.client is not None:
            await asyncio.to_thread(self.client.close)


class DockerSandbox(Sandbox):
    def __init__(self, backend: DockerBackend, user_id: str, user_root: Path, container) -> None:
        super().__init__(user_id, user_root)
        self.backend = backend
        self.container = container
        self._alive = True

    @property
    def alive(self) -> bool:
        return self._alive

    def _exec(self, cmd: list[str]) -> tuple[int | None, bytes, bytes]:
        api = self.backend.client.api
        exec_id = api.exec_create(self.container.id, cmd, user=self.backend.user, workdir=policy.WORKSPACE,
                                  environment=self.backend.env)["Id"]
        out, err = api.exec_start(exec_id, demux=True)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return code, out or b"", err or b""

    def _call_sync(self, call_id: str, tool: str, args: dict[str, Any], cwd: str, timeout: float) -> ToolResult:
        owner = self.backend.config.owner
        requests = self.backend.requests_dir(self.user_id)
        name = f"req-{os.urandom(8).hex()}.json"
        request = {"id": call_id, "op": "call", "tool": tool, "args": args, "cwd": cwd, "timeout": timeout}
        # 0600 and the sandbox's: readable by the container's user only (the runner's unlink is refused
        # by the read-only mount; the executor deletes it below).
        policy.safe_write(requests, name, json.dumps(request), owner or (os.getuid(), os.getgid()), mode=0o600)
        cmd = self.backend.command("once", json.dumps(self.backend.runner_config()), f"{REQUESTS_MOUNT}/{name}")
        try:
            code, out, err = self._exec(cmd)
        finally:
            policy.safe_unlink(requests, name)
        lines = [ln for ln in out.splitlines() if ln.strip()]
        try:
            return ToolResult.from_runner(json.loads(lines[-1]))
        except (IndexError, ValueError):
            raise SandboxError(f"tool runner failed in the container (exit {code}): {err[-500:].decode(errors='replace')}") from None

    async def call(self, call_id: str, tool: str, args: dict[str, Any], cwd: str, timeout: float) -> ToolResult:
        self.active += 1
        try:
            fut = asyncio.ensure_future(asyncio.to_thread(self._call_sync, call_id, tool, args, cwd, timeout))
            try:
                return await asyncio.wait_for(asyncio.shield(fut), timeout + EXEC_MARGIN)
            except asyncio.TimeoutError:
                await self.cancel(call_id)
                return ToolResult(False, error=f"{tool} did not finish within {timeout:g} s")
            except SandboxError:
                raise
            except Exception as exc:
                self._alive = await asyncio.to_thread(self._running)
                raise SandboxError(f"docker exec failed: {exc}") from exc
        finally:
            self.active -= 1
            self.last_used = time.monotonic()

    def _running(self) -> bool:
        try:
            self.container.reload()
            return self.container.status == "running"
        except Exception:
            return False

    async def cancel(self, call_id: str) -> None:
        cmd = self.backend.command("kill", json.dumps({"calls_dir": CALLS_DIR}), call_id)
        try:
            await asyncio.to_thread(self._exec, cmd)
        except Exception:
            log.warning("cancel exec failed", extra={"user_id": self.user_id, "call_id": call_id})

    async def close(self) -> None:
        self._alive = False
        try:
            await asyncio.to_thread(self.container.remove, force=True)
        except Exception:
            log.warning("could not remove sandbox container", extra={"user_id": self.user_id})
