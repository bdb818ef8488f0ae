"""Token verification remembers tokens it has checked, without weakening the check: an entry expires
when its token does, a token is only ever remembered under the secret that signed it, and a forged
or altered token is refused however often it is sent."""

from __future__ import annotations

import time

import pytest

from zcbot_core.accounts import auth

SECRET = "s" * 40


def test_a_remembered_token_still_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    token = auth.issue_token("alice", SECRET, 60, 0)
    assert auth.verify_token(token, SECRET).user_id == "alice"
    assert auth.verify_token(token, SECRET).user_id == "alice"  # from memory
    later = time.time() + 61
    monkeypatch.setattr(auth.time, "time", lambda: later)
    with pytest.raises(auth.AuthError, match="token expired"):
        auth.verify_token(token, SECRET)
    assert (SECRET, token) not in auth._VERIFIED  # noqa: SLF001 - forgotten: the next use is decoded again


def test_a_token_is_remembered_only_under_its_own_secret() -> None:
    token = auth.issue_token("alice", SECRET, 60, 0)
    assert auth.verify_token(token, SECRET).user_id == "alice"
    with pytest.raises(auth.AuthError, match="invalid token"):  # a rotated secret refuses it at once
        auth.verify_token(token, "rotated-" + SECRET)


@pytest.mark.parametrize("alter", [
    pytest.param(lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"), id="signature"),
    pytest.param(lambda t: t.replace(t.split(".")[1], auth.issue_token("mallory", SECRET, 60, 0).split(".")[1]),
                 id="payload-swapped"),
])
def test_an_altered_token_is_refused_every_time(alter: object) -> None:
    token = auth.issue_token("alice", SECRET, 60, 0)
    assert auth.verify_token(token, SECRET).user_id == "alice"
    forged = alter(token)  # type: ignore[operator]
    for _ in range(2):
        with pytest.raises(auth.AuthError, match="invalid token"):
            auth.verify_token(forged, SECRET)


def test_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "MAX_VERIFIED_TOKENS", 3)
    monkeypatch.setattr(auth, "_VERIFIED", {})
    tokens = [auth.issue_token(f"user{i}", SECRET, 60, 0) for i in range(5)]
    for token in tokens:
        auth.verify_token(token, SECRET)
    assert list(auth._VERIFIED) == [(SECRET, t) for t in tokens[2:]]  # noqa: SLF001 - the oldest went first
