"""A run's states and outcomes, named once.

`tasks.run_status` (`RunStatus`): idle -> [waiting ->] queued -> running -> idle | error, with `cancelling`
between when a cancel is requested (`waiting`: over the per-user cap, in the user's FIFO); a task has at most one active run (`ACTIVE`). A run's outcome
(`RunOutcome`: the loop's result, the `done` event, the scheduler's job outcome) decides which
terminal status the task gets (`RunOutcome.task_status`). Both are `str` enums: they compare equal
to, and are stored and encoded as, the plain strings the database and the bus already carry.
"""

from __future__ import annotations

from enum import Enum


class RunStatus(str, Enum):
    IDLE = "idle"
    QUEUED = "queued"
    WAITING = "waiting"  # over its user's concurrency cap, in the user's FIFO; not on the bus yet
    RUNNING = "running"
    CANCELLING = "cancelling"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class RunOutcome(str, Enum):
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    STOPPED = "stopped"  # the loop ended early on its own (iteration limit): the user may "continue"

    def __str__(self) -> str:
        return self.value

    @property
    def task_status(self) -> RunStatus:
        """The task's status once the run ended this way: only an error is kept on the task."""
        return RunStatus.ERROR if self is RunOutcome.ERROR else RunStatus.IDLE


# The statuses of a run that holds one of its user's slots (and the global queue's): they count
# against the caps, and only these can be claimed.
COUNTED: tuple[str, ...] = (RunStatus.QUEUED.value, RunStatus.RUNNING.value, RunStatus.CANCELLING.value)
# The statuses of a run that is still alive (one per task at most): a waiting run too.
ACTIVE: tuple[str, ...] = (*COUNTED, RunStatus.WAITING.value)
# Alive and claimed by a runner (the reaper asks these whether their owner still lives).
CLAIMED: tuple[str, ...] = (RunStatus.RUNNING.value, RunStatus.CANCELLING.value)
