"""The service toolkit (zcbot_core.platform.worker) on a real NATS: the pull worker takes a ready message at once,
bounds its handlers, hands unfinished messages back at drain; the task group and the periodic loop."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from zcbot_core.platform.worker import PullWorker, TaskGroup, instance_id, periodic, wait_or_stop

# Far longer than any test waits: a message held by a pending pull request would only come out at the
# poll's expiry, so a test that sees it within seconds saw it taken at once (no timing threshold).
LONG_POLL = 60.0
SEEN_WITHIN = 10.0


class Bus:
    def __init__(self, nc: Any, stream: str, subject: str) -> None:
        self.nc, self.js, self.stream, self.subject = nc, nc.jetstream(), stream, subject

    async def psub(self, durable: str = "w") -> Any:
        await self.js.add_consumer(self.stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                                                               ack_wait=30, max_deliver=5))
        return await self.js.pull_subscribe_bind(durable=durable, stream=self.stream)

    async def publish(self, body: bytes) -> None:
        await self.js.publish(self.subject, body)


@pytest.fixture
async def bus(nats_server_url: str) -> AsyncIterator[Bus]:
    nc = await nats.connect(nats_server_url)
    name = f"W{secrets.token_hex(4)}"
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.in"]))
    try:
        yield Bus(nc, name, f"{name}.in")
    finally:
        await js.delete_stream(name)
        await nc.close()


class Recorder:
    """A handler that notes each message and holds it until released."""

    def __init__(self) -> None:
        self.seen: dict[bytes, asyncio.Event] = {}
        self.release: dict[bytes, asyncio.Event] = {}
        self.acked: list[bytes] = []

    def expect(self, body: bytes) -> None:
        self.seen[body] = asyncio.Event()
        self.release[body] = asyncio.Event()

    async def __call__(self, msg: Any) -> None:
        self.seen[msg.data].set()
        await self.release[msg.data].wait()
        await msg.ack()
        self.acked.append(msg.data)


class PullRequests:
    """Sees the worker's pull requests (the JetStream API subject is plain NATS) and can answer one of
    them with a status of the server's own making, as the server does when an earlier request expires."""

    def __init__(self, bus: Bus, durable: str) -> None:
        self.bus, self.subject = bus, f"$JS.API.CONSUMER.MSG.NEXT.{bus.stream}.{durable}"
        self.inboxes: list[str] = []
        self.out = asyncio.Event()

    async def watch(self) -> None:
        async def seen(msg: Any) -> None:
            self.inboxes.append(msg.reply)
            self.out.set()

        self.sub = await self.bus.nc.subscribe(self.subject, cb=seen)

    async def late_status(self) -> None:
        """A no-wait request with nothing to deliver: the server answers "404 No Messages" on the
        worker's inbox while the worker waits on its own request (a status meant for another one)."""
        await asyncio.wait_for(self.out.wait(), SEEN_WITHIN)
        await self.bus.nc.publish(self.subject, b'{"batch": 1, "no_wait": true}', reply=self.inboxes[-1])
        await self.bus.nc.flush()
        await asyncio.sleep(0.2)  # the status is in and the worker waits on (the bug: a batch request sent)


async def test_a_message_published_while_pulling_is_taken_at_once(bus: Bus) -> None:
    """Issue 21: a run posted while the runner waited on a batch pull sat in the client until the pull
    expired (up to 0.9 s with the runner's 1 s pull): a late status from an expired request made nats.py
    send a lingering batch request, and the message after next was delivered on it and held until the
    batch filled or the request expired. Here the pull lasts 60 s; both messages (the second while the
    first is still being handled) are seen at once."""
    rec = Recorder()
    worker = PullWorker(await bus.psub(), rec, max_in_flight=8, name="t", poll_seconds=LONG_POLL)
    requests = PullRequests(bus, "w")
    await requests.watch()
    worker.start()
    try:
        await requests.late_status()
        for body in (b"first", b"second"):
            rec.expect(body)
            await asyncio.sleep(0.2)  # the worker's next pull request is out
            await bus.publish(body)
            await asyncio.wait_for(rec.seen[body].wait(), SEEN_WITHIN)
        assert worker.in_flight == 2  # the first still held by its handler when the second came
        for body in (b"first", b"second"):
            rec.release[body].set()
        deadline = time.monotonic() + SEEN_WITHIN
        while len(rec.acked) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert sorted(rec.acked) == [b"first", b"second"]
    finally:
        await worker.stop(timeout=0)  # the 60 s pull is still out: cancelled
        await worker.close()


async def test_in_flight_is_bounded_and_a_freed_slot_takes_the_next_message_at_once(bus: Bus) -> None:
    rec = Recorder()
    worker = PullWorker(await bus.psub(), rec, max_in_flight=2, name="t", poll_seconds=LONG_POLL)
    for body in (b"a", b"b", b"c"):
        rec.expect(body)
        await bus.publish(body)
    worker.start()
    try:
        await asyncio.wait_for(rec.seen[b"a"].wait(), SEEN_WITHIN)
        await asyncio.wait_for(rec.seen[b"b"].wait(), SEEN_WITHIN)
        await asyncio.sleep(0.3)
        assert not rec.seen[b"c"].is_set() and worker.in_flight == 2
        rec.release[b"a"].set()
        await asyncio.wait_for(rec.seen[b"c"].wait(), SEEN_WITHIN)
        rec.release[b"b"].set()
        rec.release[b"c"].set()
        assert await worker.wait(SEEN_WITHIN) == []
        assert sorted(rec.acked) == [b"a", b"b", b"c"]
    finally:
        await worker.stop(timeout=0)
        await worker.close()


async def test_a_backlog_is_taken_in_one_request(bus: Bus) -> None:
    """A burst (messages already waiting) starts together: the first pull takes one, the next request
    takes what is waiting behind it, not one request per message."""
    rec = Recorder()
    bodies = [f"m{i}".encode() for i in range(20)]
    for body in bodies:
        rec.expect(body)
        await bus.publish(body)
    worker = PullWorker(await bus.psub(), rec, max_in_flight=50, name="t", poll_seconds=LONG_POLL)
    requests = PullRequests(bus, "w")
    await requests.watch()
    worker.start()
    try:
        for body in bodies:
            await asyncio.wait_for(rec.seen[body].wait(), SEEN_WITHIN)
        assert len(requests.inboxes) <= 3  # one for the first message, one for the 19 behind it (+ the next pull)
        for body in bodies:
            rec.release[body].set()
        assert await worker.wait(SEEN_WITHIN) == []
    finally:
        await worker.stop(timeout=0)
        await worker.close()


async def test_drain_hands_unfinished_messages_back(bus: Bus) -> None:
    """stop + cancel returns the messages whose handlers did not finish; nak'ed, another worker gets them."""
    rec = Recorder()
    psub = await bus.psub()
    worker = PullWorker(psub, rec, max_in_flight=4, name="t", poll_seconds=0.5)
    rec.expect(b"x")
    await bus.publish(b"x")
    worker.start()
    await asyncio.wait_for(rec.seen[b"x"].wait(), SEEN_WITHIN)
    await worker.stop()
    assert await worker.wait(0.1) != []
    unfinished = await worker.cancel()
    assert [m.data for m in unfinished] == [b"x"] and worker.in_flight == 0
    for msg in unfinished:
        await msg.nak()
    await worker.close()
    again = await bus.js.pull_subscribe_bind(durable="w", stream=bus.stream)
    [msg] = await again.fetch(1, timeout=SEEN_WITHIN)
    assert msg.data == b"x" and msg.metadata.num_delivered == 2
    await msg.ack()
    await again.unsubscribe()


async def test_a_failing_handler_is_logged_and_the_worker_goes_on(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    got: list[bytes] = []

    async def handler(msg: Any) -> None:
        await msg.ack()
        if msg.data == b"bad":
            raise RuntimeError("boom")
        got.append(msg.data)

    worker = PullWorker(await bus.psub(), handler, max_in_flight=1, name="t", poll_seconds=LONG_POLL)
    worker.start()
    try:
        await bus.publish(b"bad")
        await bus.publish(b"good")
        deadline = time.monotonic() + SEEN_WITHIN
        while not got and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert got == [b"good"]
        assert "t handler failed" in caplog.text
    finally:
        await worker.stop(timeout=0)
        await worker.close()


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PullWorker(None, None, max_in_flight=0, name="t")  # type: ignore[arg-type]


async def test_task_group_waits_then_cancels_what_is_left() -> None:
    group = TaskGroup()
    quick_done = asyncio.Event()

    async def quick() -> None:
        quick_done.set()

    group.spawn(quick())
    slow = group.spawn(asyncio.sleep(60))
    await group.close(grace=0.2, cancel_wait=5.0)
    assert quick_done.is_set() and slow.cancelled() and not group


async def test_periodic_runs_every_interval_survives_a_failure_and_stops_on_the_event() -> None:
    stop = asyncio.Event()
    rounds: list[int] = []

    async def body() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("one bad round")
        if len(rounds) == 3:
            stop.set()

    await asyncio.wait_for(periodic(stop, 0.01, body, "test loop"), 5.0)
    assert rounds == [0, 1, 2]
    assert await wait_or_stop(stop, 60.0) is True
    assert await wait_or_stop(asyncio.Event(), 0.01) is False


def test_instance_ids_are_unique_per_call() -> None:
    a, b = instance_id(), instance_id()
    assert a != b and a.rsplit("-", 2)[1].isdigit()
