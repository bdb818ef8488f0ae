"""Operator-side user management: one set of rules for `zcbot user add|role|passwd|list|disable|enable`,
`zcbot up`'s first admin and the admin API's user routes (zcbot_gateway/routes/admin_users.py).

Each operation is a function of a synchronous SQLAlchemy `Session` (the CLI opens one per command
with `with_session`; the gateway runs the same function through `AsyncSession.run_sync`), so the
rules live here once:
- `add` refuses an email that exists unless `update=True`, and says what changed;
- nothing removes the last admin (demotion or disabling of the only enabled admin is refused);
- a disabled user keeps its data but has no password (it cannot log in) and role `disabled`; only
  `enable` (with a new password) brings it back: a password or role change of a disabled user is
  refused with that advice (it would report success to a user who still cannot log in).
Emails are stored stripped and lower-cased and matched case-insensitively.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from zcbot_core.accounts.auth import hash_password, validate_new_password
from zcbot_core.db.engine import normalize_url
from zcbot_core.db.models import User
from zcbot_core.errors import ZcbotError

ROLES = ("user", "admin")
DISABLED = "disabled"  # the role of a disabled user: not `admin`, so every admin check refuses it
T = TypeVar("T")


class UserAdminError(ZcbotError, ValueError):
    """A user operation the rules refuse (the message says why and what to do instead)."""

    code = "user_admin_refused"
    http_status = 409


class UserNotFound(UserAdminError):
    code = "user_not_found"
    http_status = 404


@dataclass(frozen=True)
class UserInfo:
    user_id: str
    email: str | None
    role: str
    has_password: bool
    created_at: str
    status: str  # active | disabled


def generate_password() -> str:
    """A random password (24 characters) for a user that gets one shown once."""
    return secrets.token_urlsafe(18)


def normalize_email(email: str) -> str:
    value = (email or "").strip().lower()
    if "@" not in value or value.startswith("@") or any(ch.isspace() for ch in value) or len(value) > 320:
        raise UserAdminError(f"not a valid email address: {email!r}")
    return value


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise UserAdminError(f"role must be one of {', '.join(ROLES)}")


def with_session(db_url: str, op: Callable[[Session], T]) -> T:
    """Run `op` in one transaction on a throw-away engine (the CLI's way in)."""
    engine = create_engine(normalize_url(db_url), poolclass=NullPool)
    try:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            return op(session)
    finally:
        engine.dispose()


def _find(session: Session, email: str) -> User | None:
    return session.execute(select(User).where(func.lower(User.email) == email)).scalar_one_or_none()


def _require(session: Session, email: str) -> User:
    user = _find(session, normalize_email(email))
    if user is None:
        raise UserNotFound(f"no user with email {normalize_email(email)}")
    return user


def _guard_last_admin(session: Session, user: User) -> None:
    """Refuse taking `user` out of the admin role when it is the only admin (row-locked so two
    concurrent demotions cannot both pass)."""
    if user.role != "admin":
        return
    admins = session.execute(select(User.user_id).where(User.role == "admin").with_for_update()).all()
    if len(admins) <= 1:
        raise UserAdminError(f"{user.email} is the only admin: make another user admin first")


def add(session: Session, email: str, password: str, role: str = "user", *, update: bool = False) -> tuple[str, list[str]]:
    """Create a password user, or (update=True) change an existing one's password and role.

    Returns (user_id, what changed). An existing email without update=True is refused."""
    email = normalize_email(email)
    _check_role(role)
    validate_new_password(password)
    user = _find(session, email)
    if user is None:
        user = User(user_id=uuid.uuid4().hex, email=email, name=email.split("@", 1)[0], role=role,
                    password_hash=hash_password(password))
        session.add(user)
        return user.user_id, [f"created with role {role}"]
    if not update:
        raise UserAdminError(f"user {email} already exists (role {user.role}); pass --update to change its "
                             "password and role, or use `zcbot user passwd` / `zcbot user role`")
    changes = ["password changed"]
    if user.role != role:
        changes.append(f"role {user.role} -> {role}")
        if role != "admin":
            _guard_last_admin(session, user)
        user.role = role
    user.password_hash = hash_password(password)
    return user.user_id, changes


def _refuse_disabled(user: User, what: str) -> None:
    if user.role == DISABLED:
        raise UserAdminError(f"user {user.email} is disabled, so {what} would not let it log in: enable it "
                             f"(`zcbot user enable --email {user.email}`, or POST /v1/admin/users/{user.email}/enable)")


def set_role(session: Session, email: str, role: str) -> str:
    """Change a user's role (not a disabled user's: `enable`); returns the old role."""
    _check_role(role)
    user = _require(session, email)
    _refuse_disabled(user, "a new role")
    old = user.role
    if role != "admin":
        _guard_last_admin(session, user)
    user.role = role
    return old


def set_password(session: Session, email: str, password: str) -> None:
    validate_new_password(password)
    user = _require(session, email)
    _refuse_disabled(user, "a new password")
    user.password_hash = hash_password(password)


def enable(session: Session, email: str, password: str) -> None:
    """A disabled user can log in again, with this password and role `user`."""
    validate_new_password(password)
    user = _require(session, email)
    if user.role != DISABLED:
        raise UserAdminError(f"user {user.email} is not disabled (role {user.role})")
    user.role = "user"
    user.password_hash = hash_password(password)


def disable(session: Session, email: str) -> None:
    """No password, role `disabled`: it can no longer log in; its tasks and files stay."""
    user = _require(session, email)
    _guard_last_admin(session, user)
    user.role = DISABLED
    user.password_hash = None


def list_users(session: Session) -> list[UserInfo]:
    rows = session.execute(select(User).order_by(User.created_at, User.email)).scalars().all()
    return [UserInfo(u.user_id, u.email, u.role, u.password_hash is not None, u.created_at.isoformat(),
                     "disabled" if u.role == DISABLED else "active") for u in rows]


def get_user(db_url: str, email: str) -> User | None:
    """The user with this email (detached), or None."""
    email = normalize_email(email)

    def op(session: Session) -> User | None:
        user = _find(session, email)
        if user is not None:
            session.expunge(user)
        return user

    return with_session(db_url, op)


def add_user(db_url: str, email: str, password: str, role: str = "user", *, update: bool = False) -> str:
    """`add` in its own transaction; returns the user_id."""
    return with_session(db_url, lambda s: add(s, email, password, role, update=update))[0]


def admin_exists(db_url: str) -> bool:
    return with_session(
        db_url, lambda s: s.execute(select(User.user_id).where(User.role == "admin").limit(1)).first() is not None)
