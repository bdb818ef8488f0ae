"""Request dependencies (`Annotated` aliases, FastAPI full-stack-template style).

- `SettingsDep`: the `GatewaySettings` the app was created with (`app.state.settings`).
- `RuntimeDep`: the live `zcbot_core.platform.service.Runtime` (`app.state.rt`); 503 while starting/stopping.
- `SessionDep`: one `AsyncSession` per request. Function-scoped: it is closed when the route
  function returns, before the response body is sent, so a streaming (SSE) route never holds a
  pooled connection for the life of the stream. Routes commit explicitly.
- `CurrentUser`: the authenticated `user_id` (str). Bearer JWT verified with `settings.jwt_secret`;
  the user row must exist and still have the token's `token_version` (one statement on the
  autocommit pool, outside the request's session): a password or role change or the user's
  deletion revokes older tokens. Missing/invalid/expired/revoked token or unknown user -> 401 with
  `WWW-Authenticate: Bearer`.
- `TokenUser`: the token's claims (`auth.TokenClaims`), verified but not looked up: only for a route
  whose own statement requires the user row with the token's version (opening a task's events)
  and maps its absence to `unauthorized(USER_GONE)`.
- `CurrentUserRow`: the same check, giving the `User` ORM row (loaded in the request's session).
- `AdminUser`: the `user_id` of a user whose role, read from the DB on every request, is `admin`;
  otherwise 403.
- `known_profiles(settings)`: names of the configured model profiles, or None when the profile
  registry is unavailable (then callers only check for a non-empty name).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.accounts import auth
from zcbot_core.db.models import User
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import Runtime
from zcbot_gateway.config import GatewaySettings
from zcbot_gateway.errors import ServiceUnavailable

log = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="JWT from /v1/auth/login or /v1/auth/login_password")


# Dependencies are `async def` even when they do not await: FastAPI runs a plain `def` dependency
# in its thread pool, a thread hop on every request.
async def get_settings_dep(request: Request) -> GatewaySettings:
    return request.app.state.settings


SettingsDep = Annotated[GatewaySettings, Depends(get_settings_dep)]


async def get_runtime(request: Request) -> Runtime:
    rt = getattr(request.app.state, "rt", None)
    if rt is None:
        raise ServiceUnavailable("gateway is starting or stopping; retry shortly")
    return rt


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_session(rt: RuntimeDep) -> AsyncIterator[AsyncSession]:
    if not rt.has_db:
        raise ServiceUnavailable("database not configured")
    async with rt.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


USER_GONE = "invalid token: user does not exist or the token was revoked"


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"})


# The user exists with the token's version; and whether they have a cost limit of their own (a new
# message's budget check then needs no statement when they have none and no default is set, issue 43).
_USER_EXISTS = select(User.user_id, or_(func.coalesce(User.budget_daily_usd, 0) > 0,
                                        func.coalesce(User.budget_monthly_usd, 0) > 0)).where(
    User.user_id == bindparam("auth_user"), User.token_version == bindparam("auth_version"))
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _verified_claims(settings: Settings, creds: HTTPAuthorizationCredentials | None) -> auth.TokenClaims:
    if creds is None or creds.scheme.lower() != "bearer" or not creds.credentials:
        raise unauthorized("not authenticated: send 'Authorization: Bearer <token>'")
    if not settings.jwt_secret:
        raise ServiceUnavailable("authentication is not configured (JWT_SECRET unset)")
    return auth.verify_token(creds.credentials, settings.jwt_secret)  # AuthError: 401 at the edge


async def get_current_user_row(settings: SettingsDep, session: SessionDep, creds: Credentials) -> User:
    claims = _verified_claims(settings, creds)
    user = await session.get(User, claims.user_id)
    if user is None or user.token_version != claims.version:
        raise unauthorized(USER_GONE)
    # End the read-only auth transaction so its pooled connection goes back now: many routes open
    # further sessions of their own (`rt.sessions()`), and holding this one meanwhile deadlocks the
    # pool under load (every request holding one connection while waiting for a second -> 503s after
    # the pool timeout). expire_on_commit is off, so `user` stays loaded; the session stays usable.
    await session.commit()
    return user


CurrentUserRow = Annotated[User, Depends(get_current_user_row)]


async def get_current_user(request: Request, settings: SettingsDep, rt: RuntimeDep, creds: Credentials) -> str:
    """The token's user, checked to exist with one statement on the autocommit pool (no transaction,
    and the request's own session is not opened for it). `request.state.user_has_own_limit`: what the
    same statement read of the user's cost limits."""
    claims = _verified_claims(settings, creds)
    if not rt.has_db:
        raise ServiceUnavailable("database not configured")
    async with rt.autocommit.connect() as conn:
        found = (await conn.execute(_USER_EXISTS, {"auth_user": claims.user_id,
                                                   "auth_version": claims.version})).first()
    if found is None:
        raise unauthorized(USER_GONE)
    request.state.user_has_own_limit = bool(found[1])
    return claims.user_id


CurrentUser = Annotated[str, Depends(get_current_user)]


async def get_token_user(settings: SettingsDep, creds: Credentials) -> auth.TokenClaims:
    """The token's claims, not yet checked against the user row: for a route whose own statement
    checks the user and the version (and answers 401 otherwise), which saves the check's round trip."""
    return _verified_claims(settings, creds)


TokenUser = Annotated[auth.TokenClaims, Depends(get_token_user)]


async def require_admin(user: CurrentUserRow) -> str:
    # `user` was loaded from the DB by this request's fresh session: the role is never taken from
    # the token or a cache, so a demotion takes effect on the next request.
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="admin role required")
    return user.user_id


AdminUser = Annotated[str, Depends(require_admin)]


def known_profiles(settings: Settings) -> set[str] | None:
    """Configured model profile names, or None when the registry cannot be read (validate loosely)."""
    try:
        from zcbot_core.llm.profiles import load_profiles  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        return set(load_profiles(settings))
    except Exception:
        log.warning("could not load model profiles; accepting any profile name", exc_info=True)
        return None


class UnknownModelProfile(ZcbotError):
    """A task asked for a model profile the server does not have (the page translates the code)."""

    code, http_status = "unknown_model_profile", 400


def check_model_profile(settings: Settings, profile: str | None) -> str | None:
    """Validate a requested model profile name (None = keep the default). 400 when unknown."""
    if profile is None:
        return None
    name = profile.strip()
    if not name:
        raise UnknownModelProfile("model_profile must not be empty")
    known = known_profiles(settings)
    if known is not None and name not in known:
        raise UnknownModelProfile(
            f"unknown model_profile {name!r}; known profiles: {', '.join(sorted(known)) or '(none)'}")
    return name
