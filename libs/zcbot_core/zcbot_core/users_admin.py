"""Operator-side user management (`zcbot user add|role`, `zcbot up`'s first admin).

Synchronous SQLAlchemy + psycopg: these run from the CLI, outside any event loop. Emails are
stored stripped and lower-cased and matched case-insensitively.
"""

from __future__ import annotations

import uuid

from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from zcbot_core.auth import hash_password, validate_new_password
from zcbot_core.db.engine import normalize_url
from zcbot_core.db.models import User

ROLES = ("user", "admin")


def normalize_email(email: str) -> str:
    value = (email or "").strip().lower()
    if "@" not in value or value.startswith("@") or any(ch.isspace() for ch in value) or len(value) > 320:
        raise ValueError(f"not a valid email address: {email!r}")
    return value


def _engine(db_url: str) -> Engine:
    return create_engine(normalize_url(db_url), poolclass=NullPool)


def _find(session: Session, email: str) -> User | None:
    return session.execute(select(User).where(func.lower(User.email) == email)).scalar_one_or_none()


def add_user(db_url: str, email: str, password: str, role: str = "user") -> str:
    """Create or update a password user; returns its user_id (a new uuid hex for new emails)."""
    email = normalize_email(email)
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    validate_new_password(password)
    engine = _engine(db_url)
    try:
        with Session(engine) as session, session.begin():
            user = _find(session, email)
            if user is None:
                user = User(user_id=uuid.uuid4().hex, email=email, name=email.split("@", 1)[0])
                session.add(user)
            user.password_hash = hash_password(password)
            user.role = role
            user_id = user.user_id
    finally:
        engine.dispose()
    return user_id


def set_role(db_url: str, email: str, role: str) -> None:
    """Change a user's role; ValueError when no user has this email."""
    email = normalize_email(email)
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    engine = _engine(db_url)
    try:
        with Session(engine) as session, session.begin():
            user = _find(session, email)
            if user is None:
                raise ValueError(f"no user with email {email}")
            user.role = role
    finally:
        engine.dispose()


def get_user(db_url: str, email: str) -> User | None:
    """The user with this email (detached), or None."""
    email = normalize_email(email)
    engine = _engine(db_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            user = _find(session, email)
            if user is not None:
                session.expunge(user)
            return user
    finally:
        engine.dispose()


def admin_exists(db_url: str) -> bool:
    engine = _engine(db_url)
    try:
        with Session(engine) as session:
            return session.execute(select(User.user_id).where(User.role == "admin").limit(1)).first() is not None
    finally:
        engine.dispose()
