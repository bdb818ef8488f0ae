"""Synchronous SQL against a test's database, for assertions that read what the services stored."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text

from zcbot_core.db.engine import normalize_url


def _engine(url: str):  # type: ignore[no-untyped-def]
    return create_engine(normalize_url(url))


def db_rows(url: str, sql: str, **params: object) -> list[tuple[Any, ...]]:
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def db_exec(url: str, sql: str, **params: object) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()
