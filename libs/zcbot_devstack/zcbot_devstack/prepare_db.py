"""`zcbot up`'s database step in a child process: migrations to head, then the first admin.

A child because what it imports (SQLAlchemy, Alembic, bcrypt: ~40 MiB) would otherwise stay in the
`zcbot up` supervisor for the stack's whole life. The database URL comes in `ZCBOT_DB_URL` (never an
argument: it may hold a password, and arguments are visible to every local user); the last stdout line
is JSON `{"admin_file": path | null}`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from zcbot_devstack.embedded import EmbeddedServerError


def prepare(db_url: str, home: Path) -> Path | None:
    """Run this module as a child; the admin credentials file (None when there is none)."""
    env = {**os.environ, "ZCBOT_DB_URL": db_url, "ZCBOT_HOME": str(home)}  # the child's environment
    done = subprocess.run([sys.executable, "-m", "zcbot_devstack.prepare_db"], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise EmbeddedServerError(f"database preparation failed: {done.stderr.strip()[-2000:]}")
    admin_file = json.loads(done.stdout.strip().splitlines()[-1])["admin_file"]
    return Path(admin_file) if admin_file else None


def main() -> None:
    from zcbot_core.db.migrate import upgrade
    from zcbot_devstack.bootstrap import ensure_admin

    db_url, home = os.environ["ZCBOT_DB_URL"], Path(os.environ["ZCBOT_HOME"])  # as `prepare` set them for this child
    upgrade(db_url)
    admin_file = ensure_admin(db_url, home)
    print(json.dumps({"admin_file": str(admin_file) if admin_file else None}), flush=True)


if __name__ == "__main__":
    main()
