"""`schedules.next_fire`: local wall time -> UTC instants, DST, vixie dom/dow OR (table-driven, pure)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from zcbot_core.schedules import ScheduleError, next_fire, validate_cron, validate_timezone


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def series(cron: str, tz: str, after: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(n):
        after = next_fire(cron, tz, after)
        out.append(after)
    return out


CASES = [
    # Europe/Berlin 09:00 daily across the March switch (CET +1 -> CEST +2 on 2026-03-29 01:00Z).
    ("0 9 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), [utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]),
    # ... and across the October switch (CEST -> CET on 2026-10-25 01:00Z).
    ("0 9 * * *", "Europe/Berlin", utc(2026, 10, 23, 12), [utc(2026, 10, 24, 7), utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]),
    # New York 02:30 does not exist on spring-forward day (2026-03-08): it fires at 03:30 EDT = 07:30Z.
    ("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), [utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]),
    # New York 01:30 happens twice on 2026-11-01: a fixed-time job fires once, at the first (EDT).
    ("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
    # Every 30 minutes keeps running through Berlin's repeated hour (both passes of 02:00-02:59).
    ("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 10),
     [utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1),
      utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2)]),
    # Hourly through Berlin's skipped hour: no duplicate, no gap in real time.
    ("0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 10), [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]),
    # Vixie OR: the 1st of the month OR a Monday (2026-07-01 is a Wednesday).
    ("0 0 1 * 1", "UTC", utc(2026, 6, 27), [utc(2026, 6, 29), utc(2026, 7, 1), utc(2026, 7, 6), utc(2026, 7, 13)]),
    # Shanghai has no DST: 09:00 +08 = 01:00Z.
    ("0 9 * * 1-5", "Asia/Shanghai", utc(2026, 6, 5, 2), [utc(2026, 6, 8, 1), utc(2026, 6, 9, 1)]),
    # Aliases; leap day.
    ("@daily", "UTC", utc(2026, 6, 1, 0), [utc(2026, 6, 2), utc(2026, 6, 3)]),
    ("0 0 29 2 *", "UTC", utc(2026, 3, 1), [utc(2028, 2, 29), utc(2032, 2, 29)]),
]


@pytest.mark.parametrize(("cron", "tz", "after", "expected"), CASES, ids=[f"{c[0]}|{c[1]}|{c[2]:%m-%d}" for c in CASES])
def test_next_fire_table(cron: str, tz: str, after: datetime, expected: list[datetime]) -> None:
    assert series(cron, tz, after, len(expected)) == expected


def test_next_fire_is_strictly_after_and_utc() -> None:
    at = utc(2026, 6, 1, 9)
    nxt = next_fire("0 9 * * *", "UTC", at)
    assert nxt == utc(2026, 6, 2, 9) and nxt.tzinfo == timezone.utc
    berlin = next_fire("0 9 * * *", "Europe/Berlin", datetime(2026, 6, 1, 9, 0, tzinfo=timezone.utc).astimezone())
    assert berlin == utc(2026, 6, 2, 7)
    with pytest.raises(ValueError):
        next_fire("0 9 * * *", "UTC", datetime(2026, 6, 1))


@pytest.mark.parametrize("bad", ["", "   ", "61 * * * *", "* * * *", "* * * * * *", "0 0 31 2 *", "@reboot",
                                 "every day", None, 5])
def test_invalid_cron(bad: object) -> None:
    with pytest.raises(ScheduleError):
        validate_cron(bad)


def test_cron_normalized() -> None:
    assert validate_cron("  0   9 * *  mon-fri ") == "0 9 * * mon-fri"
    assert validate_cron("@Daily") == "@daily"


@pytest.mark.parametrize("bad", ["", "Mars/Olympus", "../etc/passwd", "/etc/localtime", "Europe/", None])
def test_invalid_timezone(bad: object) -> None:
    with pytest.raises(ScheduleError):
        validate_timezone(bad)
