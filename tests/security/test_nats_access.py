"""NATS identities and subject permissions (issue 22): an authenticated server configured as `zcbot up`
configures its embedded one, the five real services on it with their own credentials, and what an
anonymous client or a client holding one service's credentials cannot do."""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError

from tests.helpers.stack import FAKE_KEY_ENV, Stack, write_fake_profile
from tests.security.conftest import scripted_run
from zcbot_core.bus import Topology, grants
from zcbot_core.bus.codec import encode
from zcbot_core.bus.messages import ToolCallRequest
from zcbot_core.bus.topology import connect
from zcbot_core.config import Settings
from zcbot_devstack.embedded import EmbeddedNats
from zcbot_devstack.embedded.nats_auth import NatsCredentials

SERVICES = ("executor", "runner", "gateway", "scheduler", "channels")


@dataclass
class AuthNats:
    url: str
    topo: Topology
    creds: NatsCredentials

    async def client(self, service: str | None) -> nats.NATS:
        if service is None:
            return await nats.connect(self.url, connect_timeout=3, max_reconnect_attempts=0, allow_reconnect=False)
        env = self.creds.service_env(service)
        return await connect(self.url, f"as-{service}", user=env["ZCBOT_NATS_USER"], password=env["ZCBOT_NATS_PASSWORD"])


@pytest.fixture(scope="module")
def auth_nats() -> Iterator[AuthNats]:
    """Its own server (also when ZCBOT_TEST_NATS_URL names an unauthenticated one): one known prefix."""
    import tempfile

    data = Path(tempfile.mkdtemp(prefix="zcbot-test-natsauth-"))
    topo = Topology(f"s{secrets.token_hex(3)}")
    creds = NatsCredentials.generate()
    config = creds.write_server_config(data / "auth.conf", topo)
    server = EmbeddedNats(data, extra_args=["-c", str(config)]).start()
    try:
        yield AuthNats(server.url, topo, creds)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


async def test_anonymous_and_wrong_password_are_refused(auth_nats: AuthNats, nats_server_url: str) -> None:
    with pytest.raises(NatsError):
        await auth_nats.client(None)
    with pytest.raises(NatsError):
        await nats.connect(auth_nats.url.replace("nats://", "nats://runner:wrong@"), connect_timeout=3,
                           max_reconnect_attempts=0, allow_reconnect=False)
    if "@" in nats_server_url:  # the fixtures' embedded server (not an external ZCBOT_TEST_NATS_URL)
        with pytest.raises(NatsError):
            await nats.connect(nats_server_url.split("://")[0] + "://" + nats_server_url.split("@", 1)[1],
                               connect_timeout=3, max_reconnect_attempts=0, allow_reconnect=False)


async def _violation(nc: nats.NATS, subject: str, publish: bool) -> bool:
    """True when the server answers the subscription (or the publish) with a permissions violation."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc._error_cb = on_error  # type: ignore[assignment]
    if publish:
        await nc.publish(subject, b"x")
    else:
        await nc.subscribe(subject)
    await nc.flush()
    for _ in range(50):
        if any("permissions violation" in e.lower() for e in errors):
            return True
        await asyncio.sleep(0.02)
    return False


async def _denied_subscribe(nc: nats.NATS, subject: str) -> bool:
    return await _violation(nc, subject, publish=False)


def _call(topo: Topology, user: str) -> bytes:
    return encode(ToolCallRequest(call_id=secrets.token_hex(4), user_id=user, task_id="t1", run_id="r1",
                                  tool="shell", args={"command": "id"}, cwd="", timeout=5))


@pytest.mark.parametrize("service", ["gateway", "scheduler", "channels"])
async def test_non_runner_identities_cannot_call_or_read_tools(auth_nats: AuthNats, service: str) -> None:
    topo = auth_nats.topo
    nc = await auth_nats.client(service)
    try:
        # Publishing a call is refused by the server: the request never reaches an executor.
        assert await _violation(nc, topo.exec_any_subject(), publish=True)
        assert await _violation(nc, topo.exec_call_subject("h1"), publish=True)
        with pytest.raises(NatsError):
            await nc.request(topo.exec_any_subject(), _call(topo, "victim"), timeout=1)
        for subject in (topo.exec_any_subject(), topo.exec_call_subject("h1"), "_INBOX_runner.>", "_INBOX.>",
                        topo.cancel_wildcard() if service != "gateway" else "_INBOX_executor.>"):
            assert await _denied_subscribe(nc, subject), subject
    finally:
        await nc.close()


# Who may broadcast a background stop (issue 22): the services that cancel runs or delete tasks, no other.
BGSTOP_ALLOWED = {"gateway": True, "scheduler": True, "runner": False, "channels": False}


@pytest.mark.parametrize(("service", "allowed"), sorted(BGSTOP_ALLOWED.items()))
async def test_background_stop_publishers(auth_nats: AuthNats, service: str, allowed: bool) -> None:
    nc = await auth_nats.client(service)
    try:
        denied = await _violation(nc, auth_nats.topo.exec_background_stop_subject(), publish=True)
        assert denied is not allowed, f"{service}: publish exec.bgstop {'refused' if denied else 'allowed'}"
    finally:
        await nc.close()


# Who may mark runs ended (bus/ended_runs.py): the services whose transitions end runs; not the executor,
# which only reads the marks.
ENDED_WRITERS = {"gateway": True, "scheduler": True, "runner": True, "channels": True, "executor": False}


@pytest.mark.parametrize(("service", "allowed"), sorted(ENDED_WRITERS.items()))
async def test_ended_run_mark_writers(auth_nats: AuthNats, service: str, allowed: bool) -> None:
    nc = await auth_nats.client(service)
    try:
        bucket = auth_nats.topo.ended_runs_bucket
        denied = await _violation(nc, f"$KV.{bucket}.some-run", publish=True)
        assert denied is not allowed, f"{service}: mark a run ended {'refused' if denied else 'allowed'}"
        # Nobody may delete a mark through the API (the bucket's stream refuses it as well).
        assert await _violation(nc, f"$JS.API.STREAM.MSG.DELETE.KV_{bucket}", publish=True), service
    finally:
        await nc.close()


async def test_runner_cannot_serve_the_executor_subjects(auth_nats: AuthNats) -> None:
    nc = await auth_nats.client("runner")
    try:
        assert not await _violation(nc, auth_nats.topo.exec_any_subject(), publish=True)  # what it does
        for subject in (auth_nats.topo.exec_any_subject(), "_INBOX_gateway.>", auth_nats.topo.push_wildcard()):
            assert await _denied_subscribe(nc, subject), subject
    finally:
        await nc.close()


@pytest.mark.heavy  # all five services as processes (~30 s on 2 cores): the full run (`pytest -m heavy`)
async def test_the_services_run_a_tool_call_with_their_own_identities(
        auth_nats: AuthNats, start_service, settings_env: dict[str, str], fake_llm, tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_fake_profile(models, fake_llm.base_url)
    base = {"ZCBOT_NATS_URL": auth_nats.url, "ZCBOT_BUS_PREFIX": auth_nats.topo.prefix,
            "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake"}
    # The runner holds no grant key (as under `zcbot up`): its calls carry the grants the gateway made.
    only = {"runner": {"ZCBOT_RUN_GRANT_KEY": ""}}
    procs = [start_service(name, {**base, **auth_nats.creds.service_env(name), **only.get(name, {})}, wait=False)
             for name in SERVICES]
    for proc in procs:
        await proc.wait_healthy_async(timeout=90)
    settings = Settings(**{k: v for k, v in {**settings_env, **base}.items()})  # type: ignore[arg-type]
    stack = Stack(settings=settings, base_url=f"http://127.0.0.1:{settings_env['ZCBOT_HTTP_PORT']}", fake=fake_llm)
    task, events = await scripted_run(stack, "alice", "KEY-natsauth", [
        {"text": "Running.", "tool_calls": [{"name": "shell", "arguments": {"command": "echo hi-from-sandbox"}}]},
        {"text": "Done."},
    ])
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events
    tool_results = [e for e in events if e["event"] == "tool_result"]
    assert tool_results and "hi-from-sandbox" in str(tool_results[0]["data"]), events
    # A task deletion broadcasts a signed background stop: allowed for the gateway's identity.
    token = await stack.login("alice")
    async with stack.client(token) as c:
        assert (await c.delete(f"/v1/tasks/{task['task_id']}")).status_code == 204
    await asyncio.sleep(0.5)
    for proc in procs:
        assert "Permissions Violation" not in proc.log_tail(), proc.log_tail()

    # A client holding the runner's credentials calls the executor with forged requests: refused.
    from zcbot_core.tools.executor_client import ExecutorClient

    key = settings_env["ZCBOT_RUN_GRANT_KEY"]
    nc = await auth_nats.client("runner")
    try:
        client = ExecutorClient(nc, auth_nats.topo)
        task_id, cwd = task["task_id"], task.get("working_dir", "")
        run_id = next(e["data"]["run_id"] for e in events if e["event"] == "run_start")
        alice_grant = grants.issue(key, run_id, "alice", task_id)
        forged = {
            "bare user id": ("mallory", "", run_id),
            "alice's run named for mallory": ("mallory", alice_grant, run_id),
            "another run with alice's grant": ("alice", alice_grant, "other-run"),
            "a grant signed with another key": ("alice", grants.issue("not-the-key", run_id, "alice", task_id), run_id),
        }
        for case, (user, grant, rid) in forged.items():
            reply = await client.call(ToolCallRequest(call_id=secrets.token_hex(4), user_id=user, task_id=task_id,
                                                      run_id=rid, tool="shell", args={"command": "echo pwned"},
                                                      cwd=cwd, timeout=5, grant=grant))
            assert not reply.ok and "refused" in (reply.error or "") and "pwned" not in reply.output, (case, reply)
        # The run's own grant, still valid for 48 h, once the run has ended: refused (bus/ended_runs.py).
        for tool, args in (("shell", {"command": "echo pwned"}), ("read", {"path": "."})):
            reply = await client.call(ToolCallRequest(call_id=secrets.token_hex(4), user_id="alice", task_id=task_id,
                                                      run_id=run_id, tool=tool, args=args, cwd=cwd, timeout=5,
                                                      grant=alice_grant))
            assert not reply.ok and "the run has ended" in (reply.error or ""), (tool, reply)
        # A grant of a run that has not ended is served (the refusals above are the grant's doing).
        live = "live-run"
        reply = await client.call(ToolCallRequest(call_id=secrets.token_hex(4), user_id="alice", task_id=task_id,
                                                  run_id=live, tool="shell", args={"command": "echo granted"},
                                                  cwd=cwd, timeout=5, grant=grants.issue(key, live, "alice", task_id)))
        assert reply.ok and "granted" in reply.output, reply
    finally:
        await nc.close()
