"""The run state machine as a transition matrix: every status x every event (issue 34).

`MATRIX[(status, event)]` is a `Step`: refused (an error, nothing changes), a no-op (the event does not
apply: a stale delivery, an end fenced on its owner, not a reaper's candidate), or a move with its
effects. The transitions (`runstate.submit`, `.transitions`) decide from it - which submits are refused,
which cancel ends a run at once and which signals a runner, where an interrupting message goes - and
the tests hold the code to it (tests/core/runstate/test_runstate_matrix.py: the whole table against PostgreSQL
and NATS, `runstate.invariants` checked after every step).

Slots: a `queued`, `running` or `cancelling` run holds one of its user's slots (`status.COUNTED`); a
`waiting` one holds a place in its user's FIFO instead. Two rules follow for the next enqueued message
when a run ends (`transitions.start_next_input`, the one code path of every end):
- the run held a slot (finish, fail, reap): the next message's run takes the slot over (`queued`);
- it did not (a waiting run cancelled or replaced by an interrupt): the next message's run waits in
  the ended run's place, then the user's free slots are given to the oldest waiting runs (`promote`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from zcbot_core.errors import ZcbotError
from zcbot_core.runstate.errors import NothingToCancel, RunConflict
from zcbot_core.runstate.status import COUNTED, RunStatus


class Event(str, Enum):
    SUBMIT_REJECT = "submit:reject"  # a message, multitask=reject
    SUBMIT_ENQUEUE = "submit:enqueue"  # a message, multitask=enqueue: behind the active run
    SUBMIT_INTERRUPT = "submit:interrupt"  # a message, multitask=interrupt: it goes first, the active run stops
    CANCEL = "cancel"  # the user (or a scheduled job's timeout) cancels the task's run
    CLAIM = "claim"  # a runner takes the run's delivered request
    FINISH = "finish"  # its owner ends the run: ok, stopped or cancelled
    FAIL = "fail"  # its owner ends the run in error
    REAP = "reap"  # its owner and its request are gone (the reaper), or its request kept being lost (requeue)
    PROMOTE = "promote"  # a slot of the user is free: the oldest waiting runs start
    HAND_BACK = "hand_back"  # its owner stops without ending it (drain): the request is redelivered

    def __str__(self) -> str:
        return self.value


class Effect(str, Enum):
    NEW_RUN = "new_run"  # the message is stored and its run starts
    NEEDS_SLOT = "needs_slot"  # the run is `queued` only into a free slot of its user, else it waits (FIFO)
    PUBLISH = "publish"  # the run's request goes to JetStream (after the commit)
    PENDING_BACK = "pending_back"  # the message waits behind the active run, last
    PENDING_FRONT = "pending_front"  # the message waits behind the active run, first
    SIGNAL_CANCEL = "signal_cancel"  # the run's runner is told to stop (KV + core subject)
    ENDS_RUN = "ends_run"  # the run is over: marked ended and answered (`done`)
    NEXT_INPUT = "next_input"  # the next waiting message starts (`transitions.start_next_input`)
    OWNER_SET = "owner_set"  # the claiming runner owns the run (a takeover when another one did)
    REDELIVER = "redeliver"  # JetStream delivers the request again; the next claim takes the run over

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Step:
    to: RunStatus | None = None  # the status it moves to (no message waiting, a slot free); None: unchanged
    effects: frozenset[Effect] = frozenset()
    refused: type[ZcbotError] | None = None  # the answer instead; nothing changes
    why: str = ""  # the refusal's text (`{status}`: the task's status)

    @property
    def applies(self) -> bool:
        return self.refused is None and (self.to is not None or bool(self.effects))

    def outcome(self, status: RunStatus, *, pending: bool, slot_free: bool) -> RunStatus:
        """The task's status once the step (and the promotion that follows a freed place) is done.
        `pending`: a message waits behind the run; `slot_free`: the user has a slot besides this run's."""
        if self.refused is not None or self.to is None:
            return status
        if Effect.NEXT_INPUT in self.effects and (pending or Effect.PENDING_FRONT in self.effects):
            # A slot the ended run held goes to the next message; else it waits in the run's place.
            return RunStatus.QUEUED if status.value in COUNTED or slot_free else RunStatus.WAITING
        if Effect.NEEDS_SLOT in self.effects and not slot_free:
            return RunStatus.WAITING
        return self.to

    def refuse(self, status: str) -> ZcbotError:
        assert self.refused is not None
        return self.refused(self.why.format(status=status))


S, E, F = RunStatus, Event, Effect
NOOP = Step()
_NEW_RUN = Step(S.QUEUED, frozenset({F.NEW_RUN, F.NEEDS_SLOT, F.PUBLISH}))
_ENDS = frozenset({F.ENDS_RUN, F.NEXT_INPUT, F.PUBLISH})
_CONFLICT = Step(refused=RunConflict,
                 why="a run is already {status} on this task; wait, cancel it, or send with multitask=enqueue")
_NOTHING = Step(refused=NothingToCancel, why="no run is active on this task")
_BEHIND = Step(effects=frozenset({F.PENDING_BACK}))
_FIRST_AND_STOP = Step(S.CANCELLING, frozenset({F.PENDING_FRONT, F.SIGNAL_CANCEL}))
_STOP = Step(S.CANCELLING, frozenset({F.SIGNAL_CANCEL}))

MATRIX: dict[tuple[RunStatus, Event], Step] = {
    # idle, error: no run; a message starts one, nothing else applies.
    **{(s, e): step for s in (S.IDLE, S.ERROR) for e, step in {
        E.SUBMIT_REJECT: _NEW_RUN, E.SUBMIT_ENQUEUE: _NEW_RUN, E.SUBMIT_INTERRUPT: _NEW_RUN, E.CANCEL: _NOTHING,
        E.CLAIM: NOOP, E.FINISH: NOOP, E.FAIL: NOOP, E.REAP: NOOP, E.PROMOTE: NOOP, E.HAND_BACK: NOOP}.items()},
    # waiting: in its user's FIFO, on no runner; it ends where it is asked to.
    (S.WAITING, E.SUBMIT_REJECT): _CONFLICT,
    (S.WAITING, E.SUBMIT_ENQUEUE): _BEHIND,
    # The interrupting message takes the waiting run's place; the waiting run ends (cancelled).
    (S.WAITING, E.SUBMIT_INTERRUPT): Step(S.IDLE, _ENDS | {F.PENDING_FRONT}),
    (S.WAITING, E.CANCEL): Step(S.IDLE, _ENDS),
    (S.WAITING, E.CLAIM): NOOP,  # never published: no delivery to claim
    (S.WAITING, E.FINISH): NOOP,
    (S.WAITING, E.FAIL): NOOP,
    (S.WAITING, E.REAP): NOOP,
    (S.WAITING, E.PROMOTE): Step(S.QUEUED, frozenset({F.NEEDS_SLOT, F.PUBLISH})),
    (S.WAITING, E.HAND_BACK): NOOP,
    # queued: published, not claimed yet.
    (S.QUEUED, E.SUBMIT_REJECT): _CONFLICT,
    (S.QUEUED, E.SUBMIT_ENQUEUE): _BEHIND,
    (S.QUEUED, E.SUBMIT_INTERRUPT): _FIRST_AND_STOP,
    (S.QUEUED, E.CANCEL): _STOP,
    (S.QUEUED, E.CLAIM): Step(S.RUNNING, frozenset({F.OWNER_SET})),
    (S.QUEUED, E.FINISH): NOOP,  # no owner yet: an end is fenced
    (S.QUEUED, E.FAIL): NOOP,
    (S.QUEUED, E.REAP): Step(S.ERROR, _ENDS),  # the requeue sweep gives up on a request lost again and again
    (S.QUEUED, E.PROMOTE): NOOP,
    (S.QUEUED, E.HAND_BACK): NOOP,
    # running: a runner owns it.
    (S.RUNNING, E.SUBMIT_REJECT): _CONFLICT,
    (S.RUNNING, E.SUBMIT_ENQUEUE): _BEHIND,
    (S.RUNNING, E.SUBMIT_INTERRUPT): _FIRST_AND_STOP,
    (S.RUNNING, E.CANCEL): _STOP,
    (S.RUNNING, E.CLAIM): Step(S.RUNNING, frozenset({F.OWNER_SET})),  # a redelivery: taken over
    (S.RUNNING, E.FINISH): Step(S.IDLE, _ENDS),
    (S.RUNNING, E.FAIL): Step(S.ERROR, _ENDS),
    (S.RUNNING, E.REAP): Step(S.ERROR, _ENDS),
    (S.RUNNING, E.PROMOTE): NOOP,
    (S.RUNNING, E.HAND_BACK): Step(S.RUNNING, frozenset({F.REDELIVER})),
    # cancelling: published to a runner (claimed or not), told to stop; its runner ends it.
    (S.CANCELLING, E.SUBMIT_REJECT): _CONFLICT,
    (S.CANCELLING, E.SUBMIT_ENQUEUE): _BEHIND,
    (S.CANCELLING, E.SUBMIT_INTERRUPT): _FIRST_AND_STOP,
    (S.CANCELLING, E.CANCEL): _STOP,
    (S.CANCELLING, E.CLAIM): Step(S.CANCELLING, frozenset({F.OWNER_SET})),
    (S.CANCELLING, E.FINISH): Step(S.IDLE, _ENDS),
    (S.CANCELLING, E.FAIL): Step(S.ERROR, _ENDS),
    (S.CANCELLING, E.REAP): Step(S.ERROR, _ENDS),
    (S.CANCELLING, E.PROMOTE): NOOP,
    (S.CANCELLING, E.HAND_BACK): Step(S.CANCELLING, frozenset({F.REDELIVER})),
}

MULTITASK_EVENT = {"reject": Event.SUBMIT_REJECT, "enqueue": Event.SUBMIT_ENQUEUE, "interrupt": Event.SUBMIT_INTERRUPT}


def step(status: str, event: Event) -> Step:
    return MATRIX[(RunStatus(status), event)]


assert len(MATRIX) == len(RunStatus) * len(Event), "every status x every event"
