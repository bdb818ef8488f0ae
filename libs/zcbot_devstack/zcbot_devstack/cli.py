"""The `zcbot` command: `up` (the whole stack), each service alone, `db upgrade`, `user`, `probe`."""

from __future__ import annotations

import argparse
import sys

from zcbot_core.config import ConfigError, get_settings
from zcbot_devstack.services import BY_NAME, NAMES


def _cmd_service(name: str) -> int:
    BY_NAME[name].run()
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from zcbot_core.llm.profiles import check_profiles
    from zcbot_devstack.stack import up

    check_profiles(get_settings())  # before any service starts (each would refuse, and be restarted)
    return up(only=args.only)


def _cmd_db(args: argparse.Namespace) -> int:
    from zcbot_core.db.migrate import upgrade

    settings = get_settings()
    if not settings.zcbot_db_url:
        raise ConfigError("ZCBOT_DB_URL must be set for `zcbot db upgrade`")
    upgrade(settings.zcbot_db_url)
    print("database upgraded to head")
    return 0


def _cmd_user(args: argparse.Namespace) -> int:
    from zcbot_core.users_admin import add_user, set_role

    settings = get_settings()
    if not settings.zcbot_db_url:
        raise ConfigError("ZCBOT_DB_URL must be set for `zcbot user`")
    if args.user_cmd == "add":
        user_id = add_user(settings.zcbot_db_url, args.email, args.password, args.role)
        print(f"user {args.email} ({user_id}) saved with role {args.role}")
    else:
        set_role(settings.zcbot_db_url, args.email, args.role)
        print(f"user {args.email} now has role {args.role}")
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    from zcbot_core.llm.probe import run_probe_cli

    return run_probe_cli(args.profile, args.long_context)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zcbot", description="zcbot: a self-hosted multi-user LLM task agent")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="run the whole stack (embedded NATS/PostgreSQL unless URLs are set)")
    up.add_argument("--only", nargs="*", choices=NAMES, help="start only these services")
    for name in NAMES:
        sub.add_parser(name, help=f"run the {name} service alone (configured by env)")
    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_cmd", required=True)
    db_sub.add_parser("upgrade", help="apply alembic migrations up to head")
    user = sub.add_parser("user", help="manage password users")
    user_sub = user.add_subparsers(dest="user_cmd", required=True)
    add = user_sub.add_parser("add")
    add.add_argument("--email", required=True)
    add.add_argument("--password", required=True)
    add.add_argument("--role", default="user", choices=("user", "admin"))
    role = user_sub.add_parser("role")
    role.add_argument("--email", required=True)
    role.add_argument("--role", required=True, choices=("user", "admin"))
    probe = sub.add_parser("probe", help="reconcile a model profile's claims with real calls")
    probe.add_argument("--profile", default=None)
    probe.add_argument("--long-context", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd in BY_NAME:
            code = _cmd_service(args.cmd)
        elif args.cmd == "up":
            code = _cmd_up(args)
        elif args.cmd == "db":
            code = _cmd_db(args)
        elif args.cmd == "user":
            code = _cmd_user(args)
        else:
            code = _cmd_probe(args)
    except ConfigError as exc:
        print(f"zcbot: configuration error: {exc}", file=sys.stderr)
        code = 2
    except ValueError as exc:  # bad command input (e.g. an unknown email for `user role`)
        print(f"zcbot: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
