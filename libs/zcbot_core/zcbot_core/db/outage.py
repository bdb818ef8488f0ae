"""Telling "the database is unreachable" from "this query is wrong" (one rule for every service).

The gateway answers an outage with 503 + Retry-After instead of a 500 (zcbot_gateway/errors.py); the
runner leaves a run unacked on one, so JetStream redelivers it and it resumes from its last saved
step once PostgreSQL is back (zcbot_runner/execution.py), instead of ending it in error.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def is_db_outage(exc: BaseException) -> bool:
    """True for failures that mean the database is unreachable (connect, pool timeout, a connection
    lost mid-statement), False for the ones a query causes (syntax, constraint, data)."""
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated)
