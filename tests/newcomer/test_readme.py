"""The newcomer's path, literally as the README's "Set up" says, in a fresh clone and a fresh venv:
`python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/zcbot up`, then `zcbot user add`
against that stack (ZCBOT_HOME only, no database URL), a run with the fake model, and Ctrl-C leaves
no process behind.

Bounded in time: the fresh venv sees the test venv's installed packages through one `.pth` line (the
"wheel cache"), so `pip install -e .` only builds the editable project. Ports are free ones (a shared
CI machine), set through the variables `zcbot up --help` lists; the model is the fake one, through a
profile file (ZCBOT_MODELS_DIR), as an operator would add a provider.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import psutil
import pytest

from bench.startup import wait_line
from tests.helpers.sse import sse_events
from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from zcbot_devstack.embedded import free_port
from zcbot_devstack.services import SERVICE_PORT_ENV

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]  # a clone, an install, then two stacks

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _readme_setup_command() -> str:
    """The README's one-line set-up command (the test fails if the README changes it)."""
    match = re.search(r"```bash\n(python3 -m venv \.venv && [^\n]*zcbot up)\n```", README)
    assert match, "README's set-up command not found"
    return match.group(1)


def _sh(cmd: str, cwd: Path, env: dict[str, str], timeout: float) -> None:
    done = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (cmd, done.stdout[-2000:], done.stderr[-2000:])


async def _one_run(base: str, email: str, password: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        login = await c.post("/v1/auth/login_password", json={"email": email, "password": password})
        assert login.status_code == 200, login.text
        c.headers["Authorization"] = f"Bearer {login.json()['token']}"
        task = await c.post("/v1/tasks", json={"name": "hello"})
        assert task.status_code == 201, task.text
        posted = await c.post(f"/v1/tasks/{task.json()['task_id']}/messages", json={"content": "hello there"})
        assert posted.status_code == 202, posted.text
        out = []
        async with asyncio.timeout(60), c.stream("GET", posted.json()["events_url"]) as r:
            async for event in sse_events(r):
                out.append(event)
        return out


def test_the_readme_set_up_works_for_a_newcomer(os_tmp_dir: Path) -> None:
    setup = _readme_setup_command()
    install, _, up_cmd = setup.rpartition(" && ")
    assert up_cmd == ".venv/bin/zcbot up"
    clone = os_tmp_dir / "zcbot"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=60)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY", "DEEPSEEK_", "PIP_REQUIRE"))}
    # The venv first, then one line that lets it reuse the packages installed here, then the rest.
    venv_cmd, _, pip_cmd = install.partition(" && ")
    _sh(venv_cmd, clone, env, 120)
    purelib = Path(sysconfig.get_paths(vars={"base": str(clone / ".venv"), "platbase": str(clone / ".venv")})["purelib"])
    (purelib / "zz_reuse_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _sh(pip_cmd, clone, env, 300)

    fake_out = os_tmp_dir / "fake.out"
    fake = subprocess.Popen([sys.executable, "-m", "zcbot_fakellm"], stdout=fake_out.open("wb"), env=env)
    home = os_tmp_dir / "home"
    up_out = os_tmp_dir / "up.out"
    up = None
    try:
        ready = wait_line(fake_out, "READY ", fake, 30)
        fake_port = int(ready.split()[1])
        write_fake_profile(os_tmp_dir / "models", f"http://127.0.0.1:{fake_port}/v1")
        ports = {name: free_port() for name in SERVICE_PORT_ENV}
        stack_env = {**env, "ZCBOT_HOME": str(home), "ZCBOT_MODELS_DIR": str(os_tmp_dir / "models"),
                     "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
                     **{SERVICE_PORT_ENV[n]: str(p) for n, p in ports.items()}}
        started = time.monotonic()
        up = subprocess.Popen(["bash", "-c", f"exec {up_cmd}"], cwd=clone, env=stack_env,
                              stdout=up_out.open("wb"), stderr=subprocess.STDOUT)
        text = wait_line(up_out, "zcbot is up", up, 120)
        print(f"newcomer: launch to ready {time.monotonic() - started:.1f}s")
        assert "default model profile: fake" in text and f"{FAKE_KEY_ENV} is set" in text
        assert f"http://127.0.0.1:{ports['gateway']}" in text

        add = subprocess.run([str(clone / ".venv/bin/zcbot"), "user", "add", "--email", "new@example.com",
                              "--password", "newcomer-pw-1"], cwd=clone, env=stack_env, capture_output=True,
                             text=True, timeout=60)
        assert add.returncode == 0 and "created with role user" in add.stdout, (add.stdout, add.stderr)

        events = asyncio.run(_one_run(f"http://127.0.0.1:{ports['gateway']}", "new@example.com", "newcomer-pw-1"))
        names = [e["event"] for e in events]
        assert names[0] == "run_start" and names[-1] == "done" and "text" in names, names
        assert events[-1]["data"]["status"] == "ok"  # type: ignore[index]

        tree = psutil.Process(up.pid).children(recursive=True)
        assert len(tree) >= 7  # five services, NATS, PostgreSQL (and its backends)
        up.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(60) == 0
    finally:
        if up is not None and up.poll() is None:
            up.kill()
            up.wait()
        fake.send_signal(signal.SIGTERM)
        fake.wait(10)
    left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.name()) for p in left]
    assert up_out.read_text().rstrip().endswith("stopped")
    _demo_in_the_clone(clone, env, os_tmp_dir)


def _demo_in_the_clone(clone: Path, env: dict[str, str], tmp: Path) -> None:
    """The README's line for no API key: `zcbot up --demo` in the same fresh install answers a first
    message with a file made, and Ctrl-C leaves no process."""
    match = re.search(r"`(\.venv/bin/zcbot up --demo)`", README)
    assert match, "README's demo line not found"
    home, out = tmp / "demo-home", tmp / "demo.out"
    port = free_port()
    stack_env = {**env, "ZCBOT_HOME": str(home),
                 **{var: str(free_port()) for var in SERVICE_PORT_ENV.values()}, "ZCBOT_HTTP_PORT": str(port)}
    up = subprocess.Popen(["bash", "-c", f"exec {match.group(1)}"], cwd=clone, env=stack_env,
                          stdout=out.open("wb"), stderr=subprocess.STDOUT)
    tree: list[psutil.Process] = []
    try:
        wait_line(out, "zcbot is up", up, 120)
        creds = (home / "admin-credentials.txt").read_text()
        password = creds.split("password: ")[1].split()[0]
        events = asyncio.run(_one_run(f"http://127.0.0.1:{port}", "admin@localhost", password))
        assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-1]  # type: ignore[index]
        assert list((home / "users").glob("*/*/demo/hello.md")), "the demo wrote no file"
        tree = psutil.Process(up.pid).children(recursive=True)
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.name()) for p in left]
