"""`zcbot admin purge` and `zcbot admin orphans` (issue 40): the admin routes' operations from a shell.

Both work on `ZCBOT_DB_URL`, else on the database of the `zcbot up` running with the same
ZCBOT_HOME, and on `ZCBOT_STORAGE_ROOT` (the users' folders). Nothing is deleted without asking:
`purge` counts unless `--apply`; `orphans` lists, and `orphans --delete USER/PATH` deletes one folder
only after `--yes` or a typed confirmation.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def add_admin_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    admin = sub.add_parser("admin", help="admin clean-up: purge deleted tasks, find orphan folders",
                           description="Admin clean-up (the same operations as /v1/admin/purge and /v1/admin/orphans).")
    admin_sub = admin.add_subparsers(dest="admin_cmd", required=True)
    purge = admin_sub.add_parser("purge", help="hard-delete tasks soft-deleted longer ago than --older-than "
                                 "(with their messages, data events and versions); a dry run unless --apply")
    purge.add_argument("--older-than", required=True, metavar="AGE", help="30d, 12h, 90m or a number of days")
    purge.add_argument("--apply", action="store_true", help="really delete (default: only count)")
    orph = admin_sub.add_parser("orphans", help="list folders under the user roots that no task references")
    orph.add_argument("--user", default=None, help="only this user id")
    orph.add_argument("--delete", default=None, metavar="USER/PATH",
                      help="delete this one orphan folder (USER alone: the root of a user that no longer exists)")
    orph.add_argument("--yes", action="store_true", help="confirm --delete without asking")


def _with_sessions(op: Callable[[Any, Any], Awaitable[T]]) -> T:
    from zcbot_core.db.engine import make_engine, make_sessionmaker
    from zcbot_core.platform.config import get_settings
    from zcbot_devstack.state import database_url

    settings = get_settings()
    url = database_url(settings, "zcbot admin")

    async def main() -> T:
        engine = make_engine(url, pool_size=2, max_overflow=0)
        try:
            return await op(make_sessionmaker(engine), settings.storage_root)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KB"


def _purge(args: argparse.Namespace) -> int:
    from zcbot_core.purge import parse_age, purge_deleted

    age = parse_age(args.older_than)
    report = _with_sessions(lambda sessions, root: purge_deleted(sessions, root, age, apply=args.apply))
    verb = "deleted" if args.apply else "would delete (dry run; --apply to delete)"
    print(f"tasks soft-deleted before {report.cutoff}: {verb} {report.tasks} tasks, {report.messages} messages, "
          f"{report.data_events} data events" + (f", {report.versions} versions ({_size(report.version_bytes)})"
                                                 if args.apply else ""))
    if report.skipped_active:
        print(f"left alone: {report.skipped_active} deleted tasks with a run still active")
    return 0


def _orphans(args: argparse.Namespace) -> int:
    from zcbot_core import orphans

    if args.delete is None:
        found = _with_sessions(lambda sessions, root: orphans.find_orphans(sessions, root, args.user))
        for o in found:
            where = f"{o.user_id}/{o.path}" if o.path else f"{o.user_id} (user gone: whole root)"
            more = "+" if o.partial else ""
            print(f"{where:<60} {_size(o.bytes):>10}{more} {o.files:>7} files  modified {o.modified or '-'}")
        print(f"{len(found)} orphan folders, {_size(sum(o.bytes for o in found))}; nothing deleted "
              "(zcbot admin orphans --delete USER/PATH)")
        return 0
    user, _, path = args.delete.strip("/").partition("/")
    if not args.yes:
        if not sys.stdin.isatty():
            print("zcbot: --delete needs --yes when not run from a terminal", file=sys.stderr)
            return 2
        answer = input(f"delete {args.delete} and everything in it? type 'yes': ")
        if answer.strip() != "yes":
            print("nothing deleted")
            return 1
    gone = _with_sessions(lambda sessions, root: orphans.delete_orphan(sessions, root, user, path, confirm=True,
                                                                      lang="en"))
    print(f"deleted {args.delete}: {gone.files} files, {_size(gone.bytes)}")
    return 0


def run_admin(args: argparse.Namespace) -> int:
    return _purge(args) if args.admin_cmd == "purge" else _orphans(args)
