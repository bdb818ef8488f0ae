"""Auth (seed 003 §7.3): two logins that issue the same HS256 JWT, password change, `me`.

- `GET /v1/me/usage`: your cost budget (daily, monthly) and this month's usage (zcbot_core.accounts.budgets).
- `login`: machine-to-machine for the platform. Whoever holds PLATFORM_KEY may sign in as any
  user_id; the user row is upserted and `name`/`user_name` are COALESCEd (a given value wins, an
  omitted one keeps what is stored).
- `login_password`: email + bcrypt. Unknown email and wrong password give the same 403 after the
  same bcrypt work, so accounts cannot be enumerated.
- Both are throttled (`throttle.py`): failed sign-ins per client address, and for the password
  login per account too; past the limit, 429 with `Retry-After`.
- A password change (here or by an admin), a role change or the user's deletion revokes every
  token issued before (`auth.py`, the `ver` claim).
Roles are never put in the token (see `deps.AdminUser`).
"""

from __future__ import annotations

import hmac
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from starlette.concurrency import run_in_threadpool

from zcbot_core.accounts import auth, budgets
from zcbot_core.accounts.usage import usage_totals
from zcbot_core.db.models import User
from zcbot_core.safe_fs import paths
from zcbot_gateway.deps import CurrentUserRow, SessionDep, SettingsDep
from zcbot_gateway.errors import ServiceUnavailable
from zcbot_gateway.schemas import ChangePasswordIn, LoginIn, MeOut, OkOut, PasswordLoginIn, TokenOut, iso
from zcbot_gateway.throttle import LoginThrottle

router = APIRouter(prefix="/v1", tags=["auth"])

BAD_CREDENTIALS = "invalid email or password"


def _issue(settings: SettingsDep, user_id: str, version: int) -> TokenOut:
    if not settings.jwt_secret:
        raise ServiceUnavailable("authentication is not configured (JWT_SECRET unset)")
    token = auth.issue_token(user_id, settings.jwt_secret, settings.jwt_ttl_seconds, version)
    return TokenOut(token=token, user_id=user_id)


def _throttle(request: Request) -> LoginThrottle:
    return request.app.state.login_throttle


def _address_key(request: Request) -> str:
    # The peer address as uvicorn sees it (behind a proxy: run uvicorn with --proxy-headers and
    # --forwarded-allow-ips so this is the client's, not the proxy's).
    return "addr:" + (request.client.host if request.client else "?")


def _key_matches(given: str, expected: str | None) -> bool:
    if not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


@router.post("/auth/login", response_model=TokenOut)
async def login(request: Request, body: LoginIn, settings: SettingsDep, session: SessionDep) -> TokenOut:
    """Platform login: sign a token for `user_id` (created on first use) given PLATFORM_KEY."""
    throttle, keys = _throttle(request), [_address_key(request)]
    throttle.check(keys)  # LoginThrottled: 429 at the edge
    if not _key_matches(body.platform_key, settings.platform_key):
        throttle.failed(keys)
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="invalid platform key")
    user_id = paths.validate_user_id(body.user_id)
    stmt = insert(User).values(user_id=user_id, name=body.name, user_name=body.user_name)
    stmt = stmt.on_conflict_do_update(
        index_elements=[User.user_id],
        set_={
            "name": func.coalesce(stmt.excluded.name, User.name),
            "user_name": func.coalesce(stmt.excluded.user_name, User.user_name),
        },
    ).returning(User.token_version)
    version = (await session.execute(stmt)).scalar_one()
    await session.commit()
    return _issue(settings, user_id, version)


@router.post("/auth/login_password", response_model=TokenOut)
async def login_password(request: Request, body: PasswordLoginIn, settings: SettingsDep,
                         session: SessionDep) -> TokenOut:
    """Email + password login. Any failure is the same 403 (no account enumeration)."""
    email = body.email.strip().lower()
    throttle, keys = _throttle(request), [_address_key(request), "acct:" + email]
    throttle.check(keys)  # LoginThrottled: 429 at the edge
    user = (
        await session.scalars(select(User).where(func.lower(User.email) == email).limit(1))
    ).first() if email else None
    ok = await run_in_threadpool(auth.check_password, body.password, user.password_hash if user else None)
    if not ok or user is None:
        throttle.failed(keys)
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=BAD_CREDENTIALS)
    return _issue(settings, user.user_id, user.token_version)


@router.post("/auth/change_password", response_model=OkOut)
async def change_password(request: Request, body: ChangePasswordIn, user: CurrentUserRow,
                          session: SessionDep) -> OkOut:
    """Change your password: the old one must match (403), the new one must be acceptable (400).
    Every token issued before, this one too, stops working: sign in again with the new password."""
    # A stolen token must not become a way to guess the password: wrong old passwords are throttled.
    throttle, keys = _throttle(request), ["old-password:" + user.user_id]
    throttle.check(keys)
    ok = await run_in_threadpool(auth.check_password, body.old_password, user.password_hash)
    if not ok:
        throttle.failed(keys)
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="old password is incorrect")
    auth.validate_new_password(body.new_password)  # WeakPassword: 400 at the edge
    user.password_hash = await run_in_threadpool(auth.hash_password, body.new_password)
    await session.commit()
    return OkOut()


@router.get("/me", response_model=MeOut)
async def me(user: CurrentUserRow) -> MeOut:
    """The signed-in user's profile."""
    return MeOut(
        user_id=user.user_id,
        email=user.email,
        name=user.name,
        user_name=user.user_name,
        role=user.role,
        plan=user.plan,
        created_at=iso(user.created_at),
    )


@router.get("/me/usage")
async def my_usage(user: CurrentUserRow, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Your cost budget per period (`daily`, `monthly`: `{limit_usd (null: none), spent_usd, resets_at}`;
    spent includes calls in flight) and this period's usage totals."""
    status_ = await budgets.budget_status(session, user.user_id, budgets.Defaults.from_settings(settings))
    start = budgets.periods(datetime.now(timezone.utc))["monthly"][0]
    return {**status_, "month_usage": await usage_totals(session, start, user_id=user.user_id)}
