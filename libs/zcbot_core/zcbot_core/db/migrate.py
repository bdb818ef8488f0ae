"""Alembic driven from code (no alembic.ini needed): `zcbot db upgrade` and the fixtures call it."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from zcbot_core.db.engine import normalize_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)
