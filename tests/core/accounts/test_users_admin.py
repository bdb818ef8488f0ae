"""zcbot_core.accounts.users_admin against a real PostgreSQL: the rules every way in shares (CLI, admin API)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from zcbot_core.accounts import users_admin as ua
from zcbot_core.db.engine import normalize_url


def test_add_refuses_an_existing_email_and_update_says_what_changed(db_url: str) -> None:
    assert ua.with_session(db_url, lambda s: ua.add(s, " A@Example.COM ", "first-pass-1"))[1] == ["created with role user"]
    with pytest.raises(ua.UserAdminError, match="already exists"):
        ua.with_session(db_url, lambda s: ua.add(s, "a@example.com", "second-pass-2", "admin"))
    user = ua.get_user(db_url, "a@example.com")
    assert user is not None and user.role == "user"  # the refused call changed nothing
    _, changes = ua.with_session(db_url, lambda s: ua.add(s, "a@example.com", "second-pass-2", "admin", update=True))
    assert changes == ["password changed", "role user -> admin"]


@pytest.mark.parametrize("email", ["", "no-at-sign", "@example.com", "a b@example.com", "x" * 321 + "@e.com"])
def test_bad_emails_are_refused(db_url: str, email: str) -> None:
    with pytest.raises(ua.UserAdminError, match="not a valid email"):
        ua.with_session(db_url, lambda s: ua.add(s, email, "long-enough-1"))


def test_two_concurrent_demotions_leave_one_admin(db_url: str) -> None:
    for email in ("a@example.com", "b@example.com"):
        ua.add_user(db_url, email, "long-enough-1", "admin")
    engine = create_engine(normalize_url(db_url))
    first = Session(engine)
    first.begin()
    ua.set_role(first, "a@example.com", "user")  # holds the admin rows' locks until it commits
    outcome: list[BaseException | str] = []

    def second() -> None:
        try:
            outcome.append(ua.with_session(db_url, lambda s: ua.set_role(s, "b@example.com", "user")))
        except BaseException as exc:  # noqa: BLE001 - the refusal is what the test looks for
            outcome.append(exc)

    worker = threading.Thread(target=second)
    worker.start()
    worker.join(0.5)
    assert worker.is_alive()  # waiting on the first transaction's lock, not deciding on stale rows
    first.commit()
    first.close()
    worker.join(10)
    engine.dispose()
    assert len(outcome) == 1 and isinstance(outcome[0], ua.UserAdminError), outcome
    assert [u.email for u in ua.with_session(db_url, ua.list_users) if u.role == "admin"] == ["b@example.com"]
