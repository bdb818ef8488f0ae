"""`ZCBOT_HOME/stack.json`: what a running `zcbot up` tells other `zcbot` commands of the same
ZCBOT_HOME (its pid, instance id, database and NATS URLs, gateway URL). Written (mode 0600: the
database URL may hold a password) once the stack is prepared, removed when it stops; a file whose
pid is gone is stale and ignored."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zcbot_core.platform.config import ConfigError, Settings

STATE_FILE = "stack.json"


def write_state(home: Path, **fields: Any) -> Path:
    path = home / STATE_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"pid": os.getpid(), **fields}, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path


def remove_state(home: Path) -> None:
    path = home / STATE_FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(home: Path) -> dict[str, Any] | None:
    """The running stack's state, or None (no file, unreadable, or its `zcbot up` is gone)."""
    try:
        state = json.loads((home / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and _alive(state.get("pid")) else None


def database_url(settings: Settings, command: str) -> str:
    """ZCBOT_DB_URL, else the database of the `zcbot up` running with this ZCBOT_HOME."""
    if settings.zcbot_db_url:
        return settings.zcbot_db_url
    state = read_state(settings.home)
    if state and isinstance(state.get("db_url"), str):
        return str(state["db_url"])
    raise ConfigError(f"`{command}` needs a database: start `zcbot up` with the same ZCBOT_HOME "
                      f"({settings.home.resolve()}) or set ZCBOT_DB_URL")
