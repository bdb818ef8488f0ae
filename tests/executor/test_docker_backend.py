"""The Docker backend's own logic against a stand-in engine (the real engine is covered by the
`docker` parameter of test_backends.py, which needs a Docker engine).

The stand-in records what a container is created with (the hardening) and runs each `docker
exec` as a local process, translating the container paths, so the request-file protocol, the
reply parsing and cancel are exercised for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import policy, seccomp
from zcbot_executor.sandbox.docker import REQUESTS_MOUNT, DockerBackend


class FakeContainer:
    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.id = f"id-{name}"
        self.name = name
        self.kwargs = kwargs
        self.status = "running"
        self.removed = False

    def remove(self, force: bool = False) -> None:
        self.removed = True

    def reload(self) -> None:
        pass


class FakeAPI:
    def __init__(self, engine: "FakeEngine") -> None:
        self.engine = engine
        self.execs: dict[str, dict[str, Any]] = {}

    def exec_create(self, container_id: str, cmd: list[str], **kw: Any) -> dict[str, str]:
        exec_id = f"e{len(self.execs)}"
        self.execs[exec_id] = {"container": container_id, "cmd": cmd, **kw}
        return {"Id": exec_id}

    def exec_start(self, exec_id: str, demux: bool = False) -> tuple[bytes, bytes]:
        spec = self.execs[exec_id]
        container = next(c for c in self.engine.containers.created if c.id == spec["container"])
        volumes = container.kwargs["volumes"]
        host_of = {v["bind"]: k for k, v in volumes.items()}
        cmd = list(spec["cmd"])
        cmd[0] = sys.executable  # the container's /usr/local/bin/python3 is the host's here
        prog = cmd.index("-c") + 1  # positions follow the interpreter flags (-I -S -B), found not fixed
        cmd[prog] = cmd[prog].replace(policy.RUNNER_MOUNT, host_of[policy.RUNNER_MOUNT])
        config = json.loads(cmd[prog + 2])
        if "root" in config:
            config["root"] = host_of[policy.WORKSPACE]
        if config.get("venv"):  # the user's venv, made with the container's (here: the host's) python
            config["venv"] = host_of[policy.WORKSPACE] + config["venv"][len(policy.WORKSPACE):]
            config["python"] = sys.executable
            config["tmp"] = str(self.engine.tmp)
        config["calls_dir"] = str(self.engine.tmp / "calls")
        cmd[prog + 2] = json.dumps(config)
        for bind in (policy.WORKSPACE, REQUESTS_MOUNT):  # the request file's path
            if len(cmd) > prog + 3 and cmd[prog + 3].startswith(bind + "/"):
                cmd[prog + 3] = host_of[bind] + cmd[prog + 3][len(bind):]
        proc = subprocess.run(cmd, capture_output=True, timeout=60, env=spec["environment"])
        spec["exit"] = proc.returncode
        return proc.stdout, proc.stderr

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"ExitCode": self.execs[exec_id].get("exit")}


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[FakeContainer] = []

    def run(self, image: str, command: list[str], name: str, **kwargs: Any) -> FakeContainer:
        c = FakeContainer(name, {"image": image, "command": command, **kwargs})
        self.created.append(c)
        return c

    def get(self, name: str) -> FakeContainer:
        import docker

        for c in self.created:
            if c.name == name and not c.removed:
                return c
        raise docker.errors.NotFound(name)

    def list(self, all: bool = False, filters: dict | None = None) -> list[FakeContainer]:
        return []


class FakeEngine:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.containers = FakeContainers()
        self.api = FakeAPI(self)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture
async def docker_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    engine = FakeEngine(tmp_path)
    monkeypatch.setattr("zcbot_executor.sandbox.docker.docker_client", lambda timeout=10.0: engine)
    config = ExecutorConfig.defaults(host="hd", storage_root=tmp_path / "users", state_dir=tmp_path / "state",
                                     backend="docker", docker_runtime="runsc")
    backend = DockerBackend(config)
    await backend.start()
    yield backend, engine, config
    await backend.close()


async def test_container_is_hardened(docker_backend) -> None:
    backend, engine, config = docker_backend
    root = config.storage_root / "u1"
    (root / "task").mkdir(parents=True)
    box = await backend.open("u1", root)
    kw = engine.containers.created[0].kwargs
    assert engine.containers.created[0].name == "zcbot-sbx-hd-u1"
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges:true"]
    assert kw["read_only"] is True and kw["network_mode"] == "none" and kw["runtime"] == "runsc"
    assert kw["pids_limit"] == config.limits.max_procs and kw["mem_limit"] == f"{config.limits.memory_mb}m"
    # the process cap is the container's pids limit, never RLIMIT_NPROC (host-wide for the shared uid)
    assert "max_procs" not in backend.runner_config()["limits"] and backend.runner_config()["limits"]["max_file_mb"]
    assert kw["nano_cpus"] > 0 and "/tmp" in kw["tmpfs"] and kw["init"] is True
    assert not kw["user"].startswith("0:") and kw["user"] != "root"
    # Its main process loads the btrfs seccomp filter (and a Landlock domain) before it runs anything.
    assert kw["command"][:6] == ["/usr/local/bin/python3", "-I", "-S", "/opt/zcbot/confine.py", seccomp.program().hex(), "0"]
    backend.kernel_quota = True  # with the kernel quota, Landlock is required (confine.py)
    assert backend.main_command()[5] == "1" and ", True); import tool_runner" in backend.command("once", "{}", "r")[5]
    backend.kernel_quota = False
    assert kw["labels"] == {"zcbot.product": "sandbox", "zcbot.user": "u1", "zcbot.instance": "hd"}
    assert kw["volumes"][str(root)] == {"bind": "/workspace", "mode": "rw"}
    assert kw["volumes"][str(backend.stage)]["mode"] == "ro"
    assert kw["volumes"][str(backend.requests_dir("u1"))] == {"bind": REQUESTS_MOUNT, "mode": "ro"}
    assert backend.requests_dir("u1").stat().st_mode & 0o777 == 0o711  # its requests open by name, unlisted
    assert not any(policy.SECRET_NAME.search(k) for k in kw["environment"])
    await box.close()
    assert engine.containers.created[0].removed


async def test_exec_per_call_round_trip(docker_backend) -> None:
    backend, engine, config = docker_backend
    root = config.storage_root / "u1"
    (root / "task").mkdir(parents=True)
    box = await backend.open("u1", root)
    r = await box.call("c1", "write", {"path": "a.txt", "content": "hello"}, "/workspace/task", 10)
    assert r.ok, r.error
    r = await box.call("c2", "shell", {"command": "cat a.txt; exit 2"}, "/workspace/task", 10)
    assert not r.ok and r.output == "hello" and r.error == "exit code 2"
    r = await box.call("c3", "read", {"path": "../../x"}, "/workspace/task", 10)
    assert not r.ok and "outside /workspace" in r.error
    # Request files live outside the user's files (so never count against their disk quota) and
    # are deleted after each call.
    assert list(backend.requests_dir("u1").iterdir()) == [] and not (root / ".zcbot_tmp").exists()
    assert all(e["cmd"][-1].startswith(REQUESTS_MOUNT + "/") for e in engine.api.execs.values())
    cmds = [e["cmd"] for e in engine.api.execs.values()]
    assert all(c[0] == "/usr/local/bin/python3" and c[c.index("-c") + 2] == "once" for c in cmds)
    # Each exec is confined before the runner is imported (run here for real: the calls above passed under it).
    guard = f"import confine; confine.apply(bytes.fromhex({seccomp.program().hex()!r}), False); import tool_runner"
    assert all(guard in c[c.index("-c") + 1] for c in cmds)
    assert all(e["user"] == backend.user and e["workdir"] == "/workspace" for e in engine.api.execs.values())
    await box.close()


async def test_egress_bridge_is_wired(docker_backend, tmp_path: Path) -> None:
    """The container gets the user's egress socket and runs the forwarder as its main process; the
    forwarder (run here as a host process on a free port, as the container would run it) carries a
    request through the socket to the hub, which refuses it and meters it to the socket's user."""
    import asyncio
    import urllib.error
    import urllib.request

    from zcbot_devstack.embedded import free_port
    from zcbot_executor import egress

    backend, engine, config = docker_backend
    root = config.storage_root / "u1"
    (root / "task").mkdir(parents=True)
    box = await backend.open("u1", root)
    kw = engine.containers.created[0].kwargs
    sock = await backend.egress.socket_for("u1")
    assert kw["volumes"][str(sock)] == {"bind": egress.SANDBOX_SOCKET, "mode": "rw"}
    command = engine.containers.created[0].kwargs["command"]
    assert command[-3:] == [f"{policy.RUNNER_MOUNT}/egress_forward.py", egress.SANDBOX_SOCKET, str(egress.SANDBOX_PORT)]
    assert kw["environment"]["HTTPS_PROXY"] == f"http://127.0.0.1:{egress.SANDBOX_PORT}"
    assert kw["environment"]["PATH"].startswith(f"{egress.SANDBOX_VENV}/bin:")
    r = await box.call("c1", "run_python", {"code": "import sys; print(sys.prefix)"}, "/workspace/task", 30)
    assert r.ok and r.output.strip() == str(root / ".venv"), (r.output, r.error)  # the user's venv, made on first use

    port = free_port()
    forwarder = subprocess.Popen([sys.executable, "-I", "-S", str(backend.stage / "egress_forward.py"), str(sock), str(port)])
    try:
        def fetch() -> tuple[int, str]:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
            for _ in range(50):
                try:
                    opener.open("http://blocked.example/", timeout=10)
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read().decode()
                except urllib.error.URLError:  # the forwarder is not listening yet
                    import time

                    time.sleep(0.1)
            raise AssertionError("the forwarder never answered")

        code, body = await asyncio.to_thread(fetch)
    finally:
        forwarder.kill()
        forwarder.wait()
    assert code == 403 and "not on the egress allowlist" in body
    for _ in range(50):
        if backend.egress.usage.get("u1"):
            break
        await asyncio.sleep(0.05)
    assert backend.egress.usage["u1"].refused == 1 and backend.egress.usage["u1"].total > 0
    await box.close()
