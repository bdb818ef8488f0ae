"""Sandbox escapes from inside REAL tool calls through the full stack (issue 12 item 4).

The attacker is the model: the fake LLM scripts tool calls, so they travel gateway -> JetStream ->
runner -> NATS -> executor -> bwrap exactly as a hostile model's would, and their full results are
read back from the stored conversation. A few probes go straight to the stack's executor through
an `ExecutorClient` (the runner's own client class) where the model path adds nothing.

Related, proven at the executor level in tests/executor/test_isolation.py and not repeated here:
no write access outside the user root and /tmp, only sandbox processes visible, no capabilities,
no nested user namespaces, the memory hog and output flood limits, and infinite-loop timeouts.
What that file also covers (other roots, environment leaks, network, fork bomb, leftover daemons)
is re-proven here through the runner path, with the stack's real secrets and ports as targets.

Network note: the sandbox's network namespace is first checked to have no interface but `lo` and
no route; only then are non-loopback addresses (169.254.169.254, 10.0.0.1) tried, so even a
broken sandbox could not send a packet off this machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import psutil
import pytest

from tests.helpers.auth import bearer
from tests.helpers.stack import FAKE_KEY_ENV, Stack, bare_stack, fake_llm, stack  # noqa: F401
from tests.reliability.conftest_shared import service_errors, settings_env  # noqa: F401
from zcbot_core.bus import ToolCallReply, ToolCallRequest, Topology, grants

TMP_MB = 16
EXTRA_ENV = {"ZCBOT_SANDBOX_TMP_MB": str(TMP_MB)}
CANARY = f"canary-{secrets.token_hex(8)}"
ATTACKER, VICTIM = "mallory", "victim"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


# ---- helpers ---------------------------------------------------------------------------------------


async def model_tools(stack: Stack, token: str, task_id: str, calls: list[dict[str, Any]],
                      timeout: float = 90.0) -> tuple[list[dict[str, Any]], list[str]]:
    """A run whose model makes `calls` (one turn), then answers; -> (events, full tool results)."""
    key = f"KEY-{secrets.token_hex(6)}"
    stack.fake.script(key, [{"tool_calls": calls}, {"text": "probe finished"}])
    r = await stack.post(token, task_id, f"{key} probe")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=timeout)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    async with stack.client(token) as c:
        msgs = (await c.get(f"/v1/tasks/{task_id}/messages")).json()["items"]
    run_id = r.json()["run_id"]
    results = [m["payload"]["content"] for m in msgs if m["run_id"] == run_id and m["payload"]["role"] == "tool"]
    assert len(results) == len(calls), results
    return events, results


def shell(command: str, timeout: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"command": command}
    if timeout is not None:
        args["timeout"] = timeout
    return {"name": "shell", "arguments": args}


def secret_values(stack: Stack) -> list[str]:
    s = stack.settings
    values = [CANARY, s.jwt_secret, s.platform_key, s.zcbot_channel_secret_key, stack.env[FAKE_KEY_ENV],
              urlparse(s.zcbot_db_url).password]
    return [v for v in values if v]


def assert_no_secret(stack: Stack, texts: list[str]) -> None:
    blob = "\n".join(texts)
    leaked = [v[:12] + "..." for v in secret_values(stack) if v in blob]
    assert not leaked, f"secrets visible inside the sandbox: {leaked}"


async def plant(stack: Stack) -> dict[str, Path]:
    """The victim's private file, the service's secrets file, and the attacker's task folder."""
    storage = Path(stack.settings.storage_root)
    victim = storage / VICTIM / "private"
    victim.mkdir(parents=True, exist_ok=True)
    (victim / "secret.txt").write_text(f"victim data {CANARY}\n")
    home = Path(stack.settings.zcbot_home)
    home.mkdir(parents=True, exist_ok=True)
    (home / "secrets.env").write_text(f"ZCBOT_CANARY_SECRET={CANARY}\nJWT_SECRET={stack.settings.jwt_secret}\n")
    return {"victim_file": victim / "secret.txt", "secrets_env": home / "secrets.env", "storage": storage}


async def attacker(stack: Stack, name: str = "probe") -> tuple[str, str]:
    token = await stack.login(ATTACKER)
    task = await stack.create_task(token, name)
    return token, task["task_id"]


def host_processes(marker: str) -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if marker in cmd:
            out.append(f"{p.pid}: {cmd}")
    return out


async def wait_gone(marker: str, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := host_processes(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return left


async def direct_call(stack: Stack, tool: str, args: dict[str, Any], *, user: str, cwd: str,
                      timeout: float = 0.0) -> ToolCallReply:
    """One tool call straight to the stack's executor over NATS (the runner's client class)."""
    import nats

    from zcbot_core.tools.executor_client import ExecutorClient

    nc = await nats.connect(stack.settings.zcbot_nats_url)
    try:
        client = ExecutorClient(nc, Topology(stack.settings.zcbot_bus_prefix))
        req = ToolCallRequest(call_id=secrets.token_hex(6), user_id=user, task_id="direct", run_id="direct",
                              tool=tool, args=args, cwd=cwd, timeout=timeout)
        req.grant = grants.issue(stack.settings.zcbot_run_grant_key, req.run_id, req.user_id, req.task_id)
        return await client.call(req)
    finally:
        await nc.close()


# ---- other users' roots, the service's files and secrets --------------------------------------------


@pytest.mark.heavy  # walks the sandbox's whole filesystem (find, grep -r, glob /**): ~20 s, the full run
async def test_model_cannot_reach_other_roots_service_files_or_secrets(stack: Stack,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    planted = await plant(stack)
    token, task_id = await attacker(stack)
    victim_file, secrets_env, storage = planted["victim_file"], planted["secrets_env"], planted["storage"]
    probe = " ; ".join([
        f"cat ../../{VICTIM}/private/secret.txt /workspace/../{VICTIM}/private/secret.txt {victim_file}",
        f"ls -la {storage} {storage.parent} /workspace/..",
        f"cat {secrets_env} {REPO}/pyproject.toml {REPO}/.ci/run",
        f"echo repo: $(ls -A {REPO} 2>/dev/null)",
        "cat /etc/shadow /root/.bash_history",
        "echo environ-1: $(tr '\\0' ' ' < /proc/1/environ)",
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done",
        "env",
        "cat /proc/1/cmdline | tr '\\0' ' '",
        "grep -rsl 'victim data' /workspace /tmp /etc /opt /var /home /root /run /srv /mnt /work 2>/dev/null | head",
        "find / -maxdepth 5 \\( -name secrets.env -o -name '*.env' -o -name id_rsa \\) -not -path '/proc/*' "
        "2>/dev/null | head",
        "echo probe-end",
    ])
    events, results = await model_tools(stack, token, task_id, [
        shell(probe),
        {"name": "read", "arguments": {"path": str(victim_file)}},
        {"name": "read", "arguments": {"path": f"/workspace/../{VICTIM}/private/secret.txt"}},
        {"name": "read", "arguments": {"path": "/proc/1/environ"}},
        {"name": "read", "arguments": {"path": str(secrets_env)}},
        {"name": "glob", "arguments": {"pattern": "/**/secret*"}},
        {"name": "grep", "arguments": {"pattern": "victim data", "path": "/"}},
    ])
    shell_out = results[0]
    assert "probe-end" in shell_out, shell_out[-2000:]
    assert_no_secret(stack, results)
    assert CANARY not in json.dumps(events)  # (the probes never name the canary: any hit is a leak)
    repo_line = next(line for line in shell_out.splitlines() if line.startswith("repo:"))
    assert set(repo_line.split()[1:]) <= {".venv", "venv"}, repo_line  # at most the interpreter's venv
    assert "HOME=/workspace" in shell_out  # the sandbox's own, sanitized environment was printed
    for refused in results[1:5]:
        assert refused.startswith("ERROR"), refused[:300]
    # The victim's file is intact and still private; the attacker's root gained nothing of it.
    assert victim_file.read_text() == f"victim data {CANARY}\n"
    assert not list((storage / ATTACKER).rglob("secret.txt"))
    assert service_errors(caplog) == []


# ---- planted symlinks: `read` inside, download outside ---------------------------------------------------


async def test_planted_symlinks_are_neither_read_nor_downloaded(stack: Stack) -> None:
    planted = await plant(stack)
    token, task_id = await attacker(stack, "links")
    root = planted["storage"] / ATTACKER
    # Planted on the host (as a compromised tool or an old backup might leave them) ...
    os.symlink(planted["victim_file"], root / "links" / "host_abs")
    os.symlink(f"../../{VICTIM}/private/secret.txt", root / "links" / "host_rel")
    os.symlink(planted["secrets_env"], root / "links" / "host_secrets")
    # ... and by the model itself, from inside its sandbox.
    _, results = await model_tools(stack, token, task_id, [
        shell(f"ln -s {planted['victim_file']} box_abs && ln -s ../../{VICTIM}/private/secret.txt box_rel && "
              f"ln -s {planted['secrets_env']} box_secrets && ln -s / box_root && ln -s .. box_up && "
              f"ln -s {planted['storage']} box_storage && ls -l"),
        {"name": "read", "arguments": {"path": "host_abs"}},
        {"name": "read", "arguments": {"path": "host_rel"}},
        {"name": "read", "arguments": {"path": "box_abs"}},
        {"name": "read", "arguments": {"path": "box_secrets"}},
        shell("cat host_abs host_rel host_secrets box_abs box_rel box_secrets box_storage/*/private/secret.txt; "
              "echo cat-done"),
    ])
    assert "box_root" in results[0], results[0]
    assert_no_secret(stack, results)
    async with stack.client(token) as c:
        for name in ("host_abs", "host_rel", "host_secrets", "box_abs", "box_rel", "box_secrets"):
            r = await c.get("/v1/files/download", params={"path": f"links/{name}"})
            assert r.status_code == 400 and CANARY not in r.text, (name, r.status_code, r.text[:200])
        for path in ("links/box_root/etc/passwd", f"links/box_storage/{VICTIM}/private/secret.txt",
                     f"links/box_up/../{VICTIM}/private/secret.txt", "links/box_up/links/host_abs"):
            r = await c.get("/v1/files/download", params={"path": path})
            assert r.status_code == 400 and CANARY not in r.text, (path, r.status_code, r.text[:200])
        for path in ("links/box_root", "links/box_storage", f"links/box_storage/{VICTIM}"):
            r = await c.get("/v1/files", params={"path": path})
            assert r.status_code == 400, (path, r.status_code, r.text[:200])
        r = await c.post("/v1/files/upload", params={"path": "links/box_storage/victim/private"},
                         files={"file": ("secret.txt", b"overwritten")})
        assert r.status_code == 400, r.text
        r = await c.post("/v1/files/mkdir", json={"path": "links/box_root/tmp/evil"})
        assert r.status_code == 400, r.text
        r = await c.post("/v1/files/rename", json={"path": "links/box_storage/victim", "new_name": "gone"})
        assert r.status_code == 400, r.text
        # Deleting a link removes the link, never its target.
        r = await c.post("/v1/files/delete", json={"path": "links/box_abs"})
        assert r.status_code in (200, 400), r.text
    assert planted["victim_file"].read_text() == f"victim data {CANARY}\n"
    assert planted["secrets_env"].exists() and (planted["storage"] / VICTIM / "private").is_dir()


# ---- network -----------------------------------------------------------------------------------------


NET_PROBE = """
import json, socket
out = {}
links = [line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:]]
routes = open('/proc/net/route').read().splitlines()[1:]
out['links'] = links
out['routes'] = routes
targets = %(loopback)s
if links == ['lo'] and not routes:   # an empty netns: nothing below can leave this machine
    targets += [('169.254.169.254', 80), ('10.0.0.1', 80), ('10.0.0.1', 443)]
else:
    out['NETNS-NOT-EMPTY'] = True
for host, port in targets:
    try:
        socket.create_connection((host, port), timeout=2).close()
        out[f'{host}:{port}'] = 'CONNECTED'
    except OSError as exc:
        out[f'{host}:{port}'] = f'{type(exc).__name__}: {exc}'
try:
    socket.getaddrinfo('localhost', 80)
except OSError as exc:
    out['resolve-localhost'] = str(exc)
print(json.dumps(out))
"""


async def test_no_network_from_the_sandbox_to_the_services_or_the_metadata_address(stack: Stack) -> None:
    token, task_id = await attacker(stack, "net")
    s = stack.settings
    ports = {"gateway": s.zcbot_http_port, "nats": urlparse(s.zcbot_nats_url).port,
             "postgres": urlparse(s.zcbot_db_url).port, "fake-llm": stack.fake.port}
    loopback = [(host, port) for port in ports.values() if port for host in ("127.0.0.1", "::1")]
    before = len(stack.fake.requests)
    _, results = await model_tools(stack, token, task_id, [
        {"name": "run_python", "arguments": {"code": NET_PROBE % {"loopback": repr(loopback)}}},
        shell(f"curl -s -m 2 http://127.0.0.1:{s.zcbot_http_port}/healthz || echo curl-failed; "
              f"exec 3<>/dev/tcp/127.0.0.1/{s.zcbot_http_port} && echo TCP-OPEN || echo tcp-refused"),
    ])
    out = json.loads(results[0].strip().splitlines()[-1])
    assert "NETNS-NOT-EMPTY" not in out, out
    probed = set(out) - {"links", "routes", "resolve-localhost"}
    assert len(probed) == len(loopback) + 3, out  # every service port on both loopbacks + the 3 outside
    assert "CONNECTED" not in out.values(), out
    assert "TCP-OPEN" not in results[1] and '"status"' not in results[1], results[1]
    # The sandbox's loopback is its own: the fake LLM only saw the runner's two model calls.
    assert len(stack.fake.requests) == before + 2


# ---- fork bomb, /tmp fill, daemons -------------------------------------------------------------------------


async def test_fork_bomb_from_the_model_is_contained_and_the_run_finishes(stack: Stack) -> None:
    token, task_id = await attacker(stack, "bomb")
    marker = f"bomb{secrets.token_hex(3)}"
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, len(host_processes(marker)))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    try:
        events, results = await model_tools(stack, token, task_id, [
            shell(f": {marker}; b(){{ b|b& }}; b; sleep 2; echo leader-done", timeout=4),
            shell("echo still-serving"),
        ])
    finally:
        sampling = False
        await sampler
    assert peak > 50, peak  # the bomb did go off ...
    assert peak <= 256 + 10, peak  # ... and stopped at the sandbox's process budget
    assert "Resource temporarily unavailable" in results[0] or results[0].startswith("ERROR"), results[0][-500:]
    assert time.monotonic() - started < 40
    assert results[1].strip() == "still-serving", results[1]
    assert await wait_gone(marker, 10) == []
    # The host was not starved: the gateway answered throughout and answers now.
    async with stack.client(token) as c:
        assert (await c.get("/v1/me")).status_code == 200


async def test_filling_tmp_hits_the_sandbox_tmpfs_cap_not_the_host(stack: Stack) -> None:
    token, task_id = await attacker(stack, "fill")
    marker = f"fill-{secrets.token_hex(4)}"
    reply = await direct_call(stack, "shell", {
        "command": f"dd if=/dev/zero of=/tmp/{marker} bs=1M count={TMP_MB * 4} 2>&1; "
                   f"echo size=$(stat -c %s /tmp/{marker}); df -k /tmp | tail -1; rm -f /tmp/{marker}; echo fill-done"},
        user=ATTACKER, cwd="fill", timeout=30)
    assert "fill-done" in reply.output, reply
    assert "No space left on device" in reply.output, reply.output
    size = int(reply.output.split("size=")[1].split()[0])
    assert 0 < size <= TMP_MB * 1024 * 1024, size
    df = reply.output.split("size=")[1].splitlines()[1].split()
    assert df[0] == "tmpfs" and int(df[1]) == TMP_MB * 1024, df  # the sandbox's own, size-capped /tmp
    assert not list(Path("/tmp").glob(f"{marker}*"))  # the host's /tmp never saw the file
    # The sandbox keeps working after the fill, through the model path too.
    _, results = await model_tools(stack, token, task_id, [
        shell("echo after > /tmp/small && cat /tmp/small && df -k /tmp | tail -1"),
        {"name": "write", "arguments": {"path": "note.txt", "content": "still writable"}},
    ])
    assert results[0].startswith("after"), results[0]
    assert (Path(stack.settings.storage_root) / ATTACKER / "fill" / "note.txt").read_text() == "still writable"


async def test_background_daemons_do_not_outlive_the_tool_call(stack: Stack) -> None:
    token, task_id = await attacker(stack, "daemons")
    n = 1000 + secrets.randbelow(8000)
    sleeps = [f"sleep {n}.{i}" for i in range(1, 7)]
    command = (
        f"nohup {sleeps[0]} >/dev/null 2>&1 & "
        f"setsid {sleeps[1]} >/dev/null 2>&1 & "
        f"(setsid sh -c '{sleeps[2]}' &) ; "
        f"{sleeps[3]} & disown; "
        f"python3 -c 'import os, subprocess\nif os.fork() == 0:\n    os.setsid()\n    "
        f"subprocess.Popen([\"sleep\", \"{n}.5\"], start_new_session=True)\n    os._exit(0)\n' ; "
        f"(trap \"\" HUP TERM; exec {sleeps[5]}) & "
        "sleep 0.3; echo started"
    )
    _, results = await model_tools(stack, token, task_id, [shell(command)])
    assert "started" in results[0], results[0]
    assert await wait_gone(f"sleep {n}.", 10) == []
    # ... also when a call is started and then cancelled mid-way by the user.
    key = f"KEY-{secrets.token_hex(4)}"
    stack.fake.script(key, [{"tool_calls": [shell(f"nohup sleep {n}.9 >/dev/null 2>&1 & sleep 30")]},
                            {"text": "never"}])
    r = await stack.post(token, task_id, f"{key} go")
    reader = asyncio.create_task(stack.events(token, r.json()["events_url"], timeout=30))
    deadline = time.monotonic() + 15
    while not host_processes(f"sleep {n}.9") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert host_processes(f"sleep {n}.9"), "the daemon never started"
    async with httpx.AsyncClient(base_url=stack.base_url, headers=bearer(token)) as c:
        assert (await c.post(f"/v1/tasks/{task_id}/cancel")).status_code == 202
    events = await reader
    assert events[-1]["data"]["status"] == "cancelled"
    assert await wait_gone(f"sleep {n}.", 10) == []
