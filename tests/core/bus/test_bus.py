"""The bus protocol: names from one place, strict msgpack decoding, garbage rejected."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zcbot_core.bus import (
    BusDecodeError,
    CancelRequest,
    ExecutorProbe,
    ExecutorProbeReply,
    RunRequest,
    ToolCallReply,
    Topology,
    decode,
    encode,
    tag_of,
)
from zcbot_core.bus import events as ev
from zcbot_core.bus.codec import message


def test_names_come_from_the_prefix() -> None:
    topo = Topology("zcbot")
    assert topo.run_subject("abc") == "zcbot.runs.abc"
    assert topo.event_subject("abc") == "zcbot.ev.abc"
    assert topo.cancel_subject("abc") == "zcbot.cancel.abc"
    assert topo.push_subject("u1") == "zcbot.push.u1"
    assert topo.exec_call_subject("host-1") == "zcbot.exec.host-1.call"
    assert (topo.runs_stream, topo.events_stream) == ("ZCBOT_RUNS", "ZCBOT_EVENTS")
    assert topo.cancel_bucket == "zcbot_cancel" and topo.sandbox_leases_bucket == "zcbot_sandbox_leases"
    assert topo.ended_runs_bucket == "zcbot_ended_runs" and topo.ended_runs_bucket in topo.kv_buckets
    assert Topology("t1").runs_stream == "T1_RUNS"


def test_queue_groups_come_from_the_topology() -> None:
    topo = Topology("zcbot")
    assert topo.executor_queue_group == "zcbot-executors"
    assert topo.executor_host_queue_group("host-1") == "zcbot-executors-host-1"
    assert topo.runner_advisories_queue_group == "runners-advisories"
    assert topo.channels_push_queue_group == "zcbot-channels"
    with pytest.raises(ValueError):
        topo.executor_host_queue_group("a.b")


@pytest.mark.parametrize("bad", ["a.b", "*", ">", "", "a b", "x\x00"])
def test_subject_tokens_are_validated(bad: str) -> None:
    with pytest.raises(ValueError):
        Topology().run_subject(bad)


@pytest.mark.parametrize(
    "message",
    [
        RunRequest(run_id="r", task_id="t", user_id="u", enqueued_at=1.5, origin="scheduler", scheduled_job_id="j"),
        CancelRequest(task_id="t", run_id="r", reason="timeout"),
        ToolCallReply(call_id="c", ok=False, output="", error="boom", meta={"truncated": True}),
        ev.ToolCallEvent(run_id="r", call_id="c", name="read", args={"path": "a"}, args_preview="{}"),
        ev.Done(run_id="r", status="ok", timings={"total": 1.0}),
        ExecutorProbe(call_id="c"),
        ExecutorProbeReply(call_id="c", host="h1", running=True, draining=False),
    ],
)
def test_round_trip(message: object) -> None:
    assert decode(encode(message)) == message


_LONG_TAG = "x" * 40  # longer than a fixstr: a str8


@pytest.mark.parametrize(
    ("data", "tag"),
    [
        (encode(ev.Done(run_id="r", status="ok", ts=0.0)), "ev.done"),
        (encode(ev.TextDelta(run_id="r", delta="ev.done " * 3000)), "ev.text"),  # a big map, the text mentions done
        (encode(ToolCallReply(call_id="c", ok=True, output="")), "tool_reply"),
        (msgpack.packb({"run_id": "r", "status": "ok", "t": "ev.done", "v": 1}), "ev.done"),  # tag last: older encoding
        (msgpack.packb({"t": _LONG_TAG, "v": 1}), _LONG_TAG),
        (msgpack.packb({f"k{i}": i for i in range(20)} | {"t": "cancel"}), "cancel"),  # a map16 header
        (msgpack.packb({"t": 5, "v": 1}), None),
        (msgpack.packb({"v": 1}), None),
        (msgpack.packb([1, 2]), None),
        (b"", None),
        (b"\x81", None),  # a truncated map
        (b"\x81\xa1t\xa5ab", "ab"),  # truncated inside the tag: a filter may see a prefix; decode refuses it
        (b"\xff not msgpack", None),
    ],
)
def test_tag_of_reads_the_type_without_decoding(data: bytes, tag: str | None) -> None:
    assert tag_of(data) == tag


def test_the_envelope_comes_first_and_its_names_are_reserved() -> None:
    assert list(msgpack.unpackb(encode(CancelRequest(task_id="t", run_id="r"))))[:2] == ["t", "v"]
    from dataclasses import dataclass

    @dataclass
    class Clash:
        t: str

    with pytest.raises(RuntimeError, match="envelope"):
        message("test_clash")(Clash)


@given(st.binary(max_size=256))
def test_tag_of_never_raises(data: bytes) -> None:
    tag = tag_of(data)
    assert tag is None or isinstance(tag, str)


def test_event_payload_names_its_type() -> None:
    event = ev.TextDelta(run_id="r", delta="hi")
    assert event.payload()["type"] == "text" and set(ev.EVENT_TYPES) >= {"run_start", "done", "cancelled"}


def test_unknown_fields_are_ignored_and_missing_ones_rejected() -> None:
    body = msgpack.packb({"t": "cancel", "v": 1, "task_id": "t", "run_id": "r", "added_later": 3})
    assert decode(body, CancelRequest).run_id == "r"
    with pytest.raises(BusDecodeError, match="missing field run_id"):
        decode(msgpack.packb({"t": "cancel", "v": 1, "task_id": "t"}))
    with pytest.raises(BusDecodeError, match="expected str"):
        decode(msgpack.packb({"t": "cancel", "v": 1, "task_id": 5, "run_id": "r"}))
    with pytest.raises(BusDecodeError, match="version"):
        decode(msgpack.packb({"t": "cancel", "v": 99, "task_id": "t", "run_id": "r"}))
    with pytest.raises(BusDecodeError, match="expected"):
        decode(encode(CancelRequest(task_id="t", run_id="r")), RunRequest)


@given(st.binary(max_size=256))
def test_garbage_bytes_are_rejected_cleanly(data: bytes) -> None:
    try:
        decode(data)
    except BusDecodeError:
        pass  # the only acceptable failure


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(), st.none(), st.booleans()), max_size=6))
def test_garbage_maps_never_escape_as_other_errors(body: dict) -> None:
    body = {**body, "t": "run_request", "v": 1}
    try:
        decode(msgpack.packb(body))
    except BusDecodeError:
        pass
