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

from tests.helpers.bus_setup import declare_topology
from tests.helpers.stack import FAKE_KEY_ENV, Stack, write_fake_profile
from tests.security.conftest import scripted_run
from zcbot_core.bus import Topology, grants
from zcbot_core.bus.codec import encode
from zcbot_core.bus.messages import ToolCallRequest
from zcbot_core.bus.topology import connect
from zcbot_core.bus.topology_setup import setup_topology
from zcbot_core.platform.config import Settings
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
        # The setup step (`zcbot bus setup`, as `zcbot up` runs it): the services may only check it.
        declare_topology(server.url, topo.prefix, creds)
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


# Who may publish run events (issue 34): the runners, and the services that end runs no runner holds (a
# waiting run's cancel or replacement: gateway, scheduler; a queued run given up: scheduler).
EVENT_WRITERS = {"gateway": True, "scheduler": True, "runner": True, "channels": False, "executor": False}


@pytest.mark.parametrize(("service", "allowed"), sorted(EVENT_WRITERS.items()))
async def test_run_event_publishers(auth_nats: AuthNats, service: str, allowed: bool) -> None:
    nc = await auth_nats.client(service)
    try:
        denied = await _violation(nc, auth_nats.topo.event_subject("some-task"), publish=True)
        assert denied is not allowed, f"{service}: publish a run event {'refused' if denied else 'allowed'}"
    finally:
        await nc.close()


async def test_the_gateway_identity_cancels_a_waiting_run_with_a_message_behind_it(
        auth_nats: AuthNats, settings_env: dict[str, str]) -> None:
    """Issue 34: under `zcbot up`'s identities this cancel answered 503 (the gateway could not publish
    the run's `done`) and stranded the message behind it."""
    from tests.helpers.runstate import RunHarness
    from zcbot_core.bus import decode
    from zcbot_core.bus.events import Done
    from zcbot_core.platform.service import close_runtime, open_runtime

    env = {**settings_env, "ZCBOT_NATS_URL": auth_nats.url, "ZCBOT_BUS_PREFIX": auth_nats.topo.prefix,
           **auth_nats.creds.service_env("gateway")}
    rt = await open_runtime("gateway", Settings(**env))  # type: ignore[arg-type]
    try:
        h = RunHarness(rt)
        for task in ("busy", "waits"):
            await h.add_task("gwuser", task)
        limits = dict(max_active=1)
        await h.submit("gwuser", "busy", "busy", "reject", **limits)
        waiting = await h.submit("gwuser", "waits", "first", "reject", **limits)
        behind = await h.submit("gwuser", "waits", "follow-up", "enqueue", **limits)
        assert (waiting.status, behind.status) == ("waiting", "pending")
        assert await h.cancel("gwuser", "waits", **limits) == (waiting.run_id, True)
        row = await h.task("waits")
        assert (row.run_status, row.run_id, row.pending_inputs) == ("waiting", behind.run_id, [])
        done = decode((await rt.js.get_last_msg(rt.topo.events_stream, rt.topo.event_subject("waits"))).data, Done)
        assert (done.run_id, done.status) == (waiting.run_id, "cancelled")
    finally:
        await close_runtime(rt)


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



# ---- the topology is the setup identity's (issue 36) ---------------------------------------------------
RUNTIME = ("gateway", "runner", "executor", "scheduler", "channels")


async def _js_refused(nc: nats.NATS, subject: str, body: bytes = b"{}") -> bool:
    """True when the server refuses `subject` to this identity (a permissions violation, no reply)."""
    return await _violation(nc, subject, publish=True)


@pytest.mark.parametrize("service", RUNTIME)
async def test_runtime_identities_cannot_change_the_topology(auth_nats: AuthNats, service: str) -> None:
    topo = auth_nats.topo
    nc = await auth_nats.client(service)
    try:
        for stream in (topo.runs_stream, topo.events_stream, topo.channel_inbound_stream, topo.file_changes_stream,
                       *(f"KV_{b}" for b in topo.kv_buckets)):
            for op in ("CREATE", "UPDATE", "DELETE", "PURGE"):
                assert await _js_refused(nc, f"$JS.API.STREAM.{op}.{stream}"), (service, op, stream)
        for stream, durable in ((topo.runs_stream, topo.runners_consumer),
                                (topo.channel_inbound_stream, topo.channels_consumer),
                                (topo.file_changes_stream, topo.file_changes_consumer)):
            for subject in (f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
                            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}.{topo.prefix}.x",
                            f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
                            f"$JS.API.CONSUMER.DELETE.{stream}.{durable}"):
                assert await _js_refused(nc, subject), (service, subject)
        # What it needs still works: reading a stream's info.
        info = await nc.jetstream(timeout=3).stream_info(f"KV_{topo.ended_runs_bucket}")
        assert info.config.deny_delete and info.config.deny_purge
    finally:
        await nc.close()


async def test_the_runner_cannot_shorten_the_ended_runs_bucket(auth_nats: AuthNats) -> None:
    """The attack of issue 36: the runner set the bucket's max age to 5 s, which erased every mark."""
    topo = auth_nats.topo
    stream = f"KV_{topo.ended_runs_bucket}"
    nc = await auth_nats.client("runner")
    try:
        js = nc.jetstream(timeout=2)
        await js.publish(f"$KV.{topo.ended_runs_bucket}.run-ended-before", b"1")  # a mark it may write
        config = (await js.stream_info(stream)).config
        wanted = config.max_age
        config.max_age = 5.0
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc._error_cb = on_error  # type: ignore[assignment]
        with pytest.raises(Exception):  # noqa: B017 - no reply comes: the server drops the request
            await js.update_stream(config)
        assert any("permissions violation" in e.lower() for e in errors), errors
        after = (await js.stream_info(stream)).config
        assert after.max_age == wanted and after.deny_delete and after.deny_purge and not after.allow_rollup_hdrs
        entry = await (await js.key_value(topo.ended_runs_bucket)).get("run-ended-before")
        assert entry.value == b"1"
    finally:
        await nc.close()


async def test_setup_identity_only_manages_the_topology(auth_nats: AuthNats) -> None:
    """The setup identity manages the topology only: no run request, no tool call, no KV write."""
    topo = auth_nats.topo
    nc = await auth_nats.client("setup")
    try:
        for subject in (f"{topo.prefix}.runs.t1", topo.exec_any_subject(), f"$KV.{topo.ended_runs_bucket}.x",
                        f"$JS.API.STREAM.DELETE.{topo.runs_stream}", f"$JS.API.STREAM.PURGE.{topo.events_stream}"):
            assert await _js_refused(nc, subject), subject
        assert await _denied_subscribe(nc, topo.exec_any_subject())
    finally:
        await nc.close()


async def test_services_refuse_a_weakened_ended_runs_bucket_and_setup_restores_it(auth_nats: AuthNats) -> None:
    """An operator tool (the admin) shortens the bucket: a service starting with its own identity
    refuses to (an ended run's grant would be good again once its mark expired), `zcbot bus setup`
    puts the declared settings back, and the service starts."""
    from zcbot_core.bus.topology import StreamLimits
    from zcbot_core.bus.topology_setup import TopologyError, prepare_topology

    topo = auth_nats.topo
    stream = f"KV_{topo.ended_runs_bucket}"
    admin = await nats.connect(auth_nats.url, user="admin", password=auth_nats.creds.passwords["admin"])
    runner = await auth_nats.client("runner")
    try:
        config = (await admin.jetstream().stream_info(stream)).config
        declared = config.max_age
        config.max_age = config.duplicate_window = 60.0
        await admin.jetstream().update_stream(config)
        with pytest.raises(TopologyError, match="lets marks go before their TTL"):
            await prepare_topology(runner.jetstream(timeout=2), topo, StreamLimits(), identity="runner", wait_seconds=2)
        setup = Settings(**{"ZCBOT_NATS_URL": auth_nats.url, "ZCBOT_BUS_PREFIX": topo.prefix,  # type: ignore[arg-type]
                            **auth_nats.creds.service_env("setup")})
        await setup_topology(setup)
        assert (await admin.jetstream().stream_info(stream)).config.max_age == declared
        await prepare_topology(runner.jetstream(timeout=2), topo, StreamLimits(), identity="runner", wait_seconds=2)
    finally:
        await admin.close()
        await runner.close()


async def test_a_service_with_an_identity_waits_for_the_setup_then_says_what_to_run(nats_server_url: str) -> None:
    """Nothing declared for the prefix: the check waits, then names the missing part and the command."""
    from zcbot_core.bus.topology import StreamLimits
    from zcbot_core.bus.topology_setup import TopologyError, prepare_topology

    nc = await nats.connect(nats_server_url)
    try:
        with pytest.raises(TopologyError, match="zcbot bus setup") as caught:
            await prepare_topology(nc.jetstream(timeout=1), Topology(f"undeclared{secrets.token_hex(3)}"),
                                   StreamLimits(), identity="gateway", wait_seconds=1.5)
        assert "is missing" in str(caught.value)
    finally:
        await nc.close()


async def test_an_executor_may_probe_another_host_before_taking_over_its_lease(auth_nats: AuthNats) -> None:
    """Issue 42, an executor host lost: the lease takeover asks the named host first (executor/leases.py)."""
    nc = await auth_nats.client("executor")
    denied = await _violation(nc, auth_nats.topo.exec_cancel_subject("another-host"), publish=True)
    await nc.close()
    assert not denied
