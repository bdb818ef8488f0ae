"""`bus.retry.retry_until`, the one backoff loop of the bus callers: which errors it retries, the
delays it waits, and the error it raises at its deadline (the callers on a real JetStream are in
test_topology.py, test_run_publish.py and tests/gateway/test_event_feed.py)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from zcbot_core.bus.retry import Retryable, retry_until

LOGGER = "zcbot_test.bus_retry"


class Flaky(Exception):
    """What a retryable failure looks like here (a JetStream timeout, a 503)."""


class Fatal(Exception):
    """A failure a retry cannot help (a refused request)."""


@dataclass
class Case:
    name: str
    failures: list[type[Exception]]  # raised in turn by the op; once used up it returns "ok"
    retryable: Retryable
    raises: type[BaseException] | None  # None: it returns "ok"
    calls: int | None  # None: as many as the deadline allows
    delays: list[float] = field(default_factory=list)  # the waits logged, in order (a prefix when calls is None)
    deadline: float = 5.0
    first: float = 0.01
    cap: float = 0.04


CASES = [
    Case("retryable errors are retried until the op succeeds", [Flaky, Flaky, Flaky], (Flaky,), None, 4,
         [0.01, 0.02, 0.04]),
    Case("a predicate picks the retryable errors", [Flaky, Flaky], lambda exc: not isinstance(exc, Fatal), None, 3,
         [0.01, 0.02]),
    Case("a non-retryable error is raised at once", [Fatal], (Flaky,), Fatal, 1),
    Case("a non-retryable error after retries is raised at once", [Flaky, Fatal, Flaky], (Flaky,), Fatal, 2, [0.01]),
    Case("a predicate refusing the error raises it at once", [Fatal], lambda exc: not isinstance(exc, Fatal),
         Fatal, 1),
    Case("delays double up to the cap", [Flaky] * 6, (Flaky,), None, 7, [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]),
    Case("at the deadline the last error is raised", [Flaky] * 1000, (Flaky,), Flaky, None,
         [0.01, 0.02, 0.04, 0.04], deadline=0.3),
    Case("a deadline shorter than the first wait means one try", [Flaky], (Flaky,), Flaky, 1, deadline=0.005),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_retry_until(case: Case, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    made: list[BaseException] = []
    remaining: list[float] = []

    async def op(left: float) -> str:
        remaining.append(left)
        if len(made) < len(case.failures):
            made.append(case.failures[len(made)](f"try {len(made) + 1}"))
            raise made[-1]
        return "ok"

    t0 = loop.time()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        call = retry_until(op, retryable=case.retryable, deadline_seconds=case.deadline, first_delay=case.first,
                           max_delay=case.cap, what="the test op", logger=logging.getLogger(LOGGER),
                           level=logging.INFO, extra={"case": case.name})
        if case.raises is None:
            assert await call == "ok"
        else:
            with pytest.raises(case.raises) as err:
                await call
            assert err.value is made[-1]  # the last error itself, not a wrapper
    elapsed = loop.time() - t0

    lines = [r for r in caplog.records if r.name == LOGGER]
    waits = [r.args[2] for r in lines]  # type: ignore[index]
    calls = len(remaining)
    if case.calls is not None:
        assert calls == case.calls
        assert waits == case.delays
    else:  # as many tries as fit: each wait doubles to the cap, none ends past the deadline
        assert calls > len(case.delays) and waits[:len(case.delays)] == case.delays
        assert set(waits[len(case.delays):]) <= {case.cap}
        assert sum(waits) < case.deadline <= elapsed + case.cap + 0.05
    assert len(waits) == calls - 1  # one line per retry, none for the try that ends it
    assert all(r.getMessage() == f"the test op failed (Flaky); retrying in {r.args[2]:.1f} s"  # type: ignore[index]
               for r in lines)
    assert all(r.case == case.name and r.error.startswith("Flaky(") for r in lines)  # type: ignore[attr-defined]
    assert remaining == sorted(remaining, reverse=True) and remaining[0] <= case.deadline
    assert elapsed < case.deadline + 0.5


async def test_a_cancellation_is_never_retried() -> None:
    calls = 0

    async def op(_left: float) -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError()

    with pytest.raises(asyncio.CancelledError):
        await retry_until(op, retryable=lambda exc: True, deadline_seconds=5.0, first_delay=0.01, max_delay=0.04,
                          what="the test op")
    assert calls == 1
