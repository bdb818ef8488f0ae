"""The `zcbot` command: `up` (the whole stack), each service alone, `db upgrade`, `bus setup`, `user`,
`admin` (purge, orphans), `probe`.

`zcbot user` works on `ZCBOT_DB_URL`, else on the database of the `zcbot up` running with the same
ZCBOT_HOME (its `stack.json`); the rules (no silent overwrite, never without an admin) are
zcbot_core.accounts.users_admin's. Each service's `--help` lists the environment variables it reads.
"""

from __future__ import annotations

import argparse
import sys

from zcbot_core import __version__
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import ConfigError, get_settings
from zcbot_devstack.admin_cli import add_admin_parsers, run_admin
from zcbot_devstack.services import BY_NAME, NAMES

# Settings classes each service reads beyond the shared zcbot_core.platform.config.Settings (settings_doc's refs).
SERVICE_SETTINGS = {
    "gateway": ("zcbot_gateway.config:GatewaySettings", "zcbot_core.channels.settings:ChannelSettings"),
    "channels": ("zcbot_channels.config:ChannelsServiceSettings",),
    "executor": ("zcbot_executor.config:ExecutorSettings",),
    "scheduler": ("zcbot_scheduler.config:SchedulerSettings",),
    "runner": ("zcbot_runner.config:RunnerSettings",),
    "up": (),  # `zcbot up` reads the shared settings and hands them to every service
}


class _ServiceParser(argparse.ArgumentParser):
    """A subcommand's parser: a service's (and `up`'s) --help ends with the environment variables it
    reads (imported only when help is asked for, so `zcbot <service>` starts no slower)."""

    def format_help(self) -> str:
        from zcbot_core.platform.settings_doc import load_class

        command = self.prog.split()[-1]
        if command not in SERVICE_SETTINGS or len(self.prog.split()) != 2:
            return super().format_help()
        refs = ("zcbot_core.platform.config:Settings", *SERVICE_SETTINGS[command])
        lines = ["", "environment variables:"]
        seen: set[str] = set()
        for ref in refs:
            for name, field in load_class(ref).model_fields.items():
                alias = field.alias or name
                if alias not in seen:
                    seen.add(alias)
                    lines.append(f"  {alias:<34} {field.description or ''}")
        return super().format_help() + "\n".join(lines) + "\n"


def _cmd_service(name: str) -> int:
    BY_NAME[name].run()
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    import os

    from zcbot_core.llm.profiles import check_profiles
    from zcbot_devstack.stack import up

    # Both change the environment the settings (and every service) read, so before get_settings().
    if args.port is not None:
        from zcbot_devstack.services import derived_ports

        os.environ.update(derived_ports(args.port, dict(os.environ)))
    demo_port = None
    new_home = not get_settings().home.exists()
    if args.demo:
        from zcbot_devstack.demo import prepare_demo

        demo_port = prepare_demo(os.environ)
        get_settings.cache_clear()  # the demo's models folder and default profile
    check_profiles(get_settings())  # before any service starts (each would refuse, and be restarted)
    code = up(only=args.only, separate=args.separate, verbose=args.verbose, demo_port=demo_port)
    if args.demo and new_home and code != 0:
        from zcbot_devstack.demo import forget_demo

        forget_demo(get_settings().home)  # a start refused (busy port): nothing left behind
    return code


def _cmd_db(args: argparse.Namespace) -> int:
    from zcbot_core.db.migrate import upgrade

    settings = get_settings()
    if not settings.zcbot_db_url:
        raise ConfigError("ZCBOT_DB_URL must be set for `zcbot db upgrade`")
    upgrade(settings.zcbot_db_url)
    print("database upgraded to head")
    return 0


def _cmd_bus(args: argparse.Namespace) -> int:
    import asyncio

    from zcbot_core.bus.topology_setup import setup_topology

    topo = asyncio.run(setup_topology(get_settings()))
    print(f"bus topology of prefix {topo.prefix!r} declared")
    return 0


def _password(args: argparse.Namespace) -> tuple[str, bool]:
    """The new password and whether it was generated (then printed once by the caller): `--password`,
    `--generate`, else asked twice on the terminal; without a terminal, an error saying what to pass."""
    if args.password is not None:
        return str(args.password), False
    from zcbot_core.accounts.users_admin import generate_password

    if args.generate:
        return generate_password(), True
    if not sys.stdin.isatty():
        raise ConfigError("no terminal to ask for the password: pass --password P, or --generate to have one "
                          "made and printed once")
    import getpass

    try:
        first = getpass.getpass("password: ")
        again = getpass.getpass("again: ")
    except (EOFError, KeyboardInterrupt):
        raise ConfigError("no password given") from None
    if again != first:
        raise ConfigError("the two passwords differ")
    return first, False


def _shown_once(email: str, password: str, generated: bool) -> str:
    return f"\n  password for {email} (shown once, not stored): {password}" if generated else ""


def _cmd_user(args: argparse.Namespace) -> int:
    from zcbot_core.accounts import users_admin as ua
    from zcbot_devstack.state import database_url

    db_url = database_url(get_settings(), "zcbot user")
    cmd = args.user_cmd
    email = ua.normalize_email(args.email) if cmd != "list" else ""
    if cmd == "add":
        password, generated = _password(args)
        user_id, changes = ua.with_session(db_url, lambda s: ua.add(s, email, password, args.role,
                                                                    update=args.update))
        print(f"user {email} ({user_id}): {', '.join(changes)}{_shown_once(email, password, generated)}")
    elif cmd == "role":
        old = ua.with_session(db_url, lambda s: ua.set_role(s, email, args.role))
        print(f"user {email}: role {old} -> {args.role}")
    elif cmd == "passwd":
        password, generated = _password(args)
        ua.with_session(db_url, lambda s: ua.set_password(s, email, password))
        print(f"user {email}: password changed{_shown_once(email, password, generated)}")
    elif cmd == "enable":
        password, generated = _password(args)
        ua.with_session(db_url, lambda s: ua.enable(s, email, password))
        print(f"user {email}: enabled with role user (can log in again){_shown_once(email, password, generated)}")
    elif cmd == "disable":
        ua.with_session(db_url, lambda s: ua.disable(s, email))
        print(f"user {email}: disabled (cannot log in; data kept; `zcbot user enable` undoes it)")
    else:
        print(_user_table(ua.with_session(db_url, ua.list_users)))
    return 0


def _user_table(users: list) -> str:  # type: ignore[type-arg]
    """`zcbot user list`: a header, then one row per user (a disabled user's role shows as -)."""
    rows = [("EMAIL", "ROLE", "STATUS", "CREATED", "ID")]
    rows += [(u.email or "-", "-" if u.status == "disabled" else u.role, u.status, u.created_at[:16].replace("T", " "),
              u.user_id) for u in users]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def _cmd_probe(args: argparse.Namespace) -> int:
    from zcbot_core.llm.probe import run_probe_cli

    return run_probe_cli(args.profile, args.long_context)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zcbot", description="zcbot: a self-hosted multi-user LLM task agent")
    parser.add_argument("--version", action="version", version=f"zcbot {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_ServiceParser)
    up = sub.add_parser("up", help="run the whole stack (embedded NATS/PostgreSQL unless URLs are set)",
                        description="Run every service on this machine until Ctrl-C; embedded NATS and "
                        "PostgreSQL under ZCBOT_HOME unless ZCBOT_NATS_URL / ZCBOT_DB_URL are set.")
    up.add_argument("--only", nargs="*", choices=NAMES, metavar="SERVICE",
                    help=f"start only these services (of: {', '.join(NAMES)})")
    up.add_argument("--separate", action="store_true",
                    help="each service in a process of its own, forked by a fork server (uses ~200 MiB more; "
                         "by default they share `zcbot up`'s process)")
    up.add_argument("--port", type=int, default=None, metavar="N",
                    help="the gateway on port N and the other services on N+1 to N+4 (each service's port "
                         "variable still overrides its own; default 8765)")
    up.add_argument("--demo", action="store_true",
                    help="use the scripted demo model (no API key): a first message shows a whole run")
    up.add_argument("--verbose", action="store_true",
                    help="print every service's log lines (default: one line per service when ready, "
                         "warnings and errors)")
    for name in NAMES:
        sub.add_parser(name, help=f"run the {name} service alone (configured by env)",
                       description=f"Run the {name} service alone, configured by the environment.")
    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_cmd", required=True)
    db_sub.add_parser("upgrade", help="apply alembic migrations up to head (needs ZCBOT_DB_URL)")
    bus = sub.add_parser("bus", help="message bus maintenance")
    bus_sub = bus.add_subparsers(dest="bus_cmd", required=True)
    bus_sub.add_parser("setup", help="declare the streams, KV buckets and durable consumers (needs ZCBOT_NATS_URL "
                       "and the setup identity in ZCBOT_NATS_USER/ZCBOT_NATS_PASSWORD); the services may not")
    _add_user_parsers(sub)
    add_admin_parsers(sub)
    probe = sub.add_parser("probe", help="reconcile a model profile's claims with real calls")
    probe.add_argument("--profile", default=None, help="profile name (default: ZCBOT_DEFAULT_MODEL)")
    probe.add_argument("--long-context", action="store_true",
                       help="also check recall near the profile's reliable_context (slow, costs tokens)")
    return parser


def _add_user_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    user = sub.add_parser("user", help="manage password users",
                          description="Manage password users in ZCBOT_DB_URL, or else in the database of "
                          "the `zcbot up` running with the same ZCBOT_HOME.")
    user_sub = user.add_subparsers(dest="user_cmd", required=True)
    email_help = "the user's email (matched case-insensitively)"
    password_help = "the new password (at least 8 characters; asked for twice on a terminal when omitted)"
    generate_help = "make a random password and print it once (instead of --password)"

    def with_password(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--password", default=None, help=password_help)
        group.add_argument("--generate", action="store_true", help=generate_help)

    add = user_sub.add_parser("add", help="create a password user (refuses an existing email without --update)")
    add.add_argument("--email", required=True, help=email_help)
    with_password(add)
    add.add_argument("--role", default="user", choices=("user", "admin"), help="role (default: user)")
    add.add_argument("--update", action="store_true",
                     help="the email may exist: set its password and role (never demotes the last admin)")
    role = user_sub.add_parser("role", help="change a user's role (never demotes the last admin)")
    role.add_argument("--email", required=True, help=email_help)
    role.add_argument("--role", required=True, choices=("user", "admin"), help="the new role")
    passwd = user_sub.add_parser("passwd", help="set a user's password, role unchanged (not a disabled user's)")
    passwd.add_argument("--email", required=True, help=email_help)
    with_password(passwd)
    disable = user_sub.add_parser("disable", help="stop a user from logging in (data kept; not the last admin)")
    disable.add_argument("--email", required=True, help=email_help)
    enable = user_sub.add_parser("enable", help="let a disabled user log in again (role user, a new password)")
    enable.add_argument("--email", required=True, help=email_help)
    with_password(enable)
    user_sub.add_parser("list", help="list users: email, role, status (active/disabled), created, id")


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd in BY_NAME:
            code = _cmd_service(args.cmd)
        elif args.cmd == "up":
            code = _cmd_up(args)
        elif args.cmd == "db":
            code = _cmd_db(args)
        elif args.cmd == "bus":
            code = _cmd_bus(args)
        elif args.cmd == "user":
            code = _cmd_user(args)
        elif args.cmd == "admin":
            code = run_admin(args)
        else:
            code = _cmd_probe(args)
    except ConfigError as exc:
        print(f"zcbot: configuration error: {exc}", file=sys.stderr)
        code = 2
    except (ZcbotError, ValueError) as exc:  # bad command input (e.g. an unknown email for `user role`)
        print(f"zcbot: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
