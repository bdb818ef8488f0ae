"""What `zcbot up` prepares before the services start: remembered embedded ports, the database,
the first admin, and each service's environment.

The first admin is `admin@localhost` with a random password written only to
`ZCBOT_HOME/admin-credentials.txt` (mode 0600; only the path is ever printed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from zcbot_devstack.embedded import free_port, port_is_free

DEFAULT_NATS_PORT = 4322
DEFAULT_PG_PORT = 5433
DB_NAME = "zcbot"
PORTS_FILE = "ports.json"
ADMIN_EMAIL = "admin@localhost"
ADMIN_CREDENTIALS_FILE = "admin-credentials.txt"

# The executor (root, next to the sandboxes) never signs or checks a token nor opens the database:
# it is started without the secrets and with a database URL that names nothing (as in deploy/).
EXECUTOR_WITHOUT = ("JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY")
EXECUTOR_DB_URL = "postgresql://no-database@executor.invalid/none"


# The runner serves every user's runs but must not be able to make a run grant (bus/grants.py).
RUNNER_WITHOUT = ("ZCBOT_RUN_GRANT_KEY",)
# The web search keys serve the runner's host tools (zcbot_core/web) alone: no other service holds them.
RUNNER_ONLY = ("ZCBOT_TAVILY_API_KEY", "ZCBOT_BOCHA_API_KEY")


def service_env(name: str, env: dict[str, str]) -> dict[str, str]:
    """A child service's environment: the stack's, less what that service must not hold."""
    if name == "runner":
        return {k: v for k, v in env.items() if k not in RUNNER_WITHOUT}
    env = {k: v for k, v in env.items() if k not in RUNNER_ONLY}
    if name != "executor":
        return env
    out = {k: v for k, v in env.items() if k not in EXECUTOR_WITHOUT}
    out["ZCBOT_DB_URL"] = EXECUTOR_DB_URL
    return out


def choose_port(home: Path, key: str, default: int) -> int:
    """The port remembered in ports.json if still free, else `default` if free, else any free port."""
    path = home / PORTS_FILE
    try:
        ports: dict[str, int] = json.loads(path.read_text())
    except (OSError, ValueError):
        ports = {}
    remembered = ports.get(key)
    if isinstance(remembered, int) and remembered > 0 and port_is_free(remembered):
        return remembered
    port = default if port_is_free(default) else free_port()
    ports[key] = port
    path.write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")
    return port


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def ensure_admin(db_url: str, home: Path) -> Path | None:
    """Create `admin@localhost` with a random password when the DB has no admin yet.

    The password goes only to ZCBOT_HOME/admin-credentials.txt (0600), written before the user so
    a crash in between never leaves an admin whose password nobody knows. Returns the file's path
    when it exists.
    """
    from zcbot_core.accounts.users_admin import add_user, admin_exists, generate_password

    path = home / ADMIN_CREDENTIALS_FILE
    if admin_exists(db_url):
        return path if path.exists() else None
    password = generate_password()
    _write_private(
        path,
        "# first admin, created by `zcbot up`; change the password after the first login\n"
        f"email: {ADMIN_EMAIL}\npassword: {password}\n",
    )
    add_user(db_url, ADMIN_EMAIL, password, "admin")
    return path


def ensure_database(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
