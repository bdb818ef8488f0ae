"""A redelivered run that is over: its previous runner died after ending it (issue 34, found by bench.soak).

A runner ends a run in PostgreSQL (and marks it ended on the bus), then publishes its `done`, then acks
its request. Killed between the end and `done`, it leaves a run that is over everywhere but on its
stream: a client following the run (the web's SSE, a channel's reply) waits on keep-alives forever.
JetStream redelivers the unacked request; its claim finds the run over (`claim_run` answers None). A
redelivery (not a first delivery: that one had no runner before it) is the one sign of that death, so
the runner that receives it makes sure the stream says `done` before acking it away: with the outcome
the ended mark recorded, else the one the database shows (`claim.ended_outcome`; the mark is written
then too, so the run's grant is refused from now on).

The `done` is not published twice: nothing is sent when the task's last event is already this run's
`done` (the usual case: the runner died after `done`, before its ack), and otherwise it carries the id
every `done` carries (`events.done_msg_id`), so JetStream drops it when the first one was stored after
all, within the events stream's duplicate window (2 min; a redelivery comes after ack_wait, 30 s).
"""

from __future__ import annotations

import logging

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from zcbot_core.bus import BusDecodeError, RunRequest, decode, encode
from zcbot_core.bus import events as ev
from zcbot_core.bus.ended_runs import ended_status, mark_ended
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.claim import ended_outcome

log = logging.getLogger(__name__)


def is_redelivery(msg: Msg) -> bool:
    return msg.metadata is not None and int(msg.metadata.num_delivered or 1) > 1


async def _done_is_last(rt: Runtime, req: RunRequest) -> bool:
    """The task's last event is this run's `done`."""
    try:
        last = await rt.js.get_last_msg(rt.topo.events_stream, rt.topo.event_subject(req.task_id))
        event = decode(last.data or b"", ev.RunEvent)
    except (NotFoundError, BusDecodeError):
        return False
    return isinstance(event, ev.Done) and event.run_id == req.run_id


async def answer_ended_run(rt: Runtime, req: RunRequest) -> None:
    """Make sure the stream of a run that is over says `done` (see the module docstring). Best effort:
    a failure is logged and the request is acked all the same (a client that reconnects sees the
    task's state)."""
    try:
        if await _done_is_last(rt, req):
            return
        status = await ended_status(rt.js, rt.topo, req.run_id)
        if status is None:  # its runner died before the mark too
            status = await ended_outcome(rt.autocommit, req.task_id, req.run_id)
            await mark_ended(rt.js, rt.topo, req.run_id, status)
        await rt.js.publish(rt.topo.event_subject(req.task_id), encode(ev.Done(run_id=req.run_id, status=status)),
                            headers={"Nats-Msg-Id": ev.done_msg_id(req.run_id)}, timeout=5)
        log.warning("a redelivered run was over without its done (its runner died after ending it); "
                    "published its done", extra={"task_id": req.task_id, "run_id": req.run_id, "status": status})
    except Exception as exc:
        log.warning("could not answer a redelivered run that is over", extra={"task_id": req.task_id,
                                                                              "run_id": req.run_id,
                                                                              "error": repr(exc)})
