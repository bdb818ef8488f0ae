"""Backend conformance: the same tool behaviour from every sandbox backend.

`docker` is skipped only when no Docker engine answers (the image is built from
services/executor/sandbox.Dockerfile if missing). `unsafe` runs the same runner unsandboxed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import psutil
import pytest

from zcbot_executor.background import ProcManager
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import make_backend, policy
from zcbot_executor.sandbox.base import Sandbox

REPO = Path(__file__).resolve().parents[2]


def _docker_ready(image: str) -> None:
    from zcbot_executor.sandbox.docker import docker_client, engine_available

    if not engine_available():
        pytest.skip("no Docker engine answers")
    client = docker_client(timeout=600)
    try:
        client.images.get(image)
    except Exception:
        client.images.build(path=str(REPO / "services" / "executor"), dockerfile="sandbox.Dockerfile", tag=image, rm=True)


@pytest.fixture(params=["bwrap", "docker", "unsafe"])
async def env(request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    kind = request.param
    config = ExecutorConfig.defaults(host="conf", storage_root=tmp_path / "users", state_dir=tmp_path / "state",
                                     backend=kind)
    if kind == "docker":
        await asyncio.to_thread(_docker_ready, config.docker_image)
    backend = make_backend(config)
    with caplog.at_level(logging.WARNING):
        await backend.start()
    if kind == "unsafe":
        assert any("WITHOUT a sandbox" in r.getMessage() for r in caplog.records)
    boxes: list[Sandbox] = []

    async def open_box(user: str = "u1") -> Sandbox:
        root = config.storage_root / user
        (root / "task").mkdir(parents=True, exist_ok=True)
        policy.ensure_owned(root, config.owner, recursive=True)
        box = await backend.open(user, root)
        boxes.append(box)
        return box

    yield kind, config, backend, open_box
    for box in boxes:
        await box.close()
    await backend.close()


CWD = "/workspace/task"


def _procs(pattern: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if " ".join(p.info["cmdline"] or []) == pattern:
                out.append(p)
        except psutil.Error:
            pass
    return out


async def _gone(pattern: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while _procs(pattern):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_fs_tools(env) -> None:
    _kind, _config, _backend, open_box = env
    box = await open_box()
    r = await box.call("c1", "write", {"path": "d/a.txt", "content": "one\ntwo\n"}, CWD, 10)
    assert r.ok, r.error
    r = await box.call("c2", "read", {"path": "d/a.txt"}, CWD, 10)
    assert r.ok and r.output == "     1\tone\n     2\ttwo"
    r = await box.call("c3", "edit", {"path": "d/a.txt", "old_str": "two", "new_str": "2"}, CWD, 10)
    assert r.ok, r.error
    r = await box.call("c4", "glob", {"pattern": "**/*.txt"}, CWD, 10)
    assert r.ok and r.output == "d/a.txt"
    r = await box.call("c5", "grep", {"pattern": "^2$"}, CWD, 10)
    assert r.ok and r.output == "d/a.txt:2: 2"
    r = await box.call("c6", "read", {"path": "/etc/passwd"}, CWD, 10)
    assert not r.ok and "outside /workspace" in r.error


async def test_shell_and_python(env) -> None:
    kind, _config, _backend, open_box = env
    box = await open_box()
    r = await box.call("s1", "shell", {"command": "basename \"$(pwd)\"; echo err >&2; exit 4"}, CWD, 10)
    assert not r.ok and r.error == "exit code 4" and r.output.split() == ["task", "err"] and r.meta["exit_code"] == 4
    r = await box.call("s2", "run_python", {"code": "import os, pptx, docx\nprint(os.path.basename(os.getcwd()))"}, CWD, 30)
    assert r.ok and r.output.strip() == "task", (r.error, r.output)
    r = await box.call("s3", "shell", {"command": "echo $HOME; env | grep -ci -E 'secret|token|password|_key=' || true"}, CWD, 10)
    assert r.ok and r.output.split()[-1] == "0"


async def test_timeout_and_cancel_kill_the_group(env) -> None:
    _kind, _config, _backend, open_box = env
    box = await open_box()
    started = time.monotonic()
    r = await box.call("t1", "shell", {"command": "sleep 41 & sleep 42"}, CWD, 1.0)
    assert not r.ok and "timed out after 1 s" in r.error and time.monotonic() - started < 4
    assert await _gone("sleep 41") and await _gone("sleep 42")
    call = asyncio.create_task(box.call("t2", "shell", {"command": "sleep 43 & sleep 44"}, CWD, 30))
    deadline = time.monotonic() + 10
    while not _procs("sleep 44"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await box.cancel("t2")
    r = await asyncio.wait_for(call, 5)
    assert not r.ok and ("cancelled" in r.error or "SIGKILL" in r.error), r.error
    assert await _gone("sleep 43") and await _gone("sleep 44")


async def test_concurrent_calls_for_one_user(env) -> None:
    _kind, _config, _backend, open_box = env
    box = await open_box()
    # Each command says when it started and ended (the sandbox's clock is the host's): side by side, all
    # three were running at one moment. Not a bound on the wall time, which a loaded machine's slow
    # `docker exec` start-ups broke (1.66 s against 1.6).
    command = "date +%s.%N; sleep 1.2; date +%s.%N; echo {}"
    results = await asyncio.gather(*(box.call(f"p{i}", "shell", {"command": command.format(i)}, CWD, 10) for i in range(3)),
                                   box.call("fs", "glob", {"pattern": "*"}, CWD, 10))
    spans = [[float(t) for t in r.output.split()[:2]] for r in results[:3]]
    assert [r.output.split()[2] for r in results[:3]] == ["0", "1", "2"]
    assert results[3].ok
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans  # ran side by side


async def test_background_process(env) -> None:
    _kind, config, backend, open_box = env
    await open_box()
    procs = ProcManager(config, backend)
    root = config.storage_root / "u1"
    r = await procs.start("u1", root, "t1", "task", "shell", {"command": "echo bg-$((6*7)); sleep 0.3"})
    assert r.ok, r.error
    deadline = time.monotonic() + 15
    while True:
        c = await procs.check(root, "t1", {"proc_id": r.meta["proc_id"]})
        if c.meta["status"] != "running":
            break
        assert time.monotonic() < deadline, c.output
        await asyncio.sleep(0.2)
    assert c.meta["status"] == "exited" and c.meta["exit_code"] == 0 and "bg-42" in c.output, c.output
