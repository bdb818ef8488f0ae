"""Admin user routes: the operations of `zcbot user` with the same rules (zcbot_core.accounts.users_admin:
no silent overwrite of an existing email, never without an admin). `require_admin` gates them all.

- `GET /v1/admin/users` -> `{count, results: [{user_id, email, role, has_password, created_at}]}`
- `POST /v1/admin/users {email, password, role?, update?}` -> 201 `{user_id, email, changes}`;
  an existing email without `update: true` -> 409.
- `PUT /v1/admin/users/{email}/role {role}` -> `{email, role, previous_role}`
- `PUT /v1/admin/users/{email}/password {password}` -> `{email, password_changed: true}`
- `POST /v1/admin/users/{email}/disable` -> `{email, role: "disabled"}`
- `POST /v1/admin/users/{email}/enable {password?}` -> `{email, role: "user", password?}`: a disabled user
  can log in again; without a password one is generated and returned this once. A password or role
  change of a disabled user -> 409 saying to enable it.
- `GET|PUT /v1/admin/users/{email}/budget {daily_usd, monthly_usd}` -> `{email, user_id, daily, monthly}`
  (each `{limit_usd, spent_usd, resets_at}`); null = the server default, 0 = no limit (zcbot_core.accounts.budgets).
Unknown email -> 404; taking the last admin away -> 409; a weak password -> 400. A password or role
change revokes the user's older tokens (the token_version trigger). Each operation runs in a worker
thread on its own connection (bcrypt must not block the event loop).
"""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from typing import Any, Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, Field
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from zcbot_core.accounts import budgets
from zcbot_core.accounts import users_admin as ua
from zcbot_core.db.models import User
from zcbot_core.platform.config import ConfigError
from zcbot_gateway.deps import AdminUser, SessionDep, SettingsDep
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep

router = APIRouter(prefix="/v1/admin/users", tags=["admin"])
UserPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)

Role = Literal["user", "admin"]


class NewUser(BaseModel):
    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=1, max_length=200)
    role: Role = "user"
    update: bool = False


class RoleChange(BaseModel):
    role: Role


class BudgetChange(BaseModel):
    daily_usd: float | None = Field(default=None, ge=0, le=1_000_000)
    monthly_usd: float | None = Field(default=None, ge=0, le=1_000_000)


class PasswordChange(BaseModel):
    password: str = Field(min_length=1, max_length=200)


class Enable(BaseModel):
    password: str | None = Field(default=None, min_length=1, max_length=200)


async def _run(settings: Any, op: Any) -> Any:
    if not settings.zcbot_db_url:
        raise ConfigError("database not configured (ZCBOT_DB_URL)")
    return await run_in_threadpool(ua.with_session, settings.zcbot_db_url, op)


@router.get("")
async def list_users(_: AdminUser, settings: SettingsDep, paging: UserPaging) -> dict[str, Any]:
    """Every account (list envelope)."""
    users = await _run(settings, ua.list_users)
    return paging.slice([asdict(u) for u in users])


@router.post("", status_code=status.HTTP_201_CREATED)
async def add_user(body: NewUser, _: AdminUser, settings: SettingsDep) -> dict[str, Any]:
    user_id, changes = await _run(settings, lambda s: ua.add(s, body.email, body.password, body.role,
                                                             update=body.update))
    return {"user_id": user_id, "email": ua.normalize_email(body.email), "changes": changes}


@router.put("/{email}/role")
async def set_role(email: str, body: RoleChange, _: AdminUser, settings: SettingsDep) -> dict[str, Any]:
    previous = await _run(settings, lambda s: ua.set_role(s, email, body.role))
    return {"email": ua.normalize_email(email), "role": body.role, "previous_role": previous}


@router.put("/{email}/password")
async def set_password(email: str, body: PasswordChange, _: AdminUser, settings: SettingsDep) -> dict[str, Any]:
    await _run(settings, lambda s: ua.set_password(s, email, body.password))
    return {"email": ua.normalize_email(email), "password_changed": True}


@router.post("/{email}/disable")
async def disable_user(email: str, _: AdminUser, settings: SettingsDep) -> dict[str, Any]:
    await _run(settings, lambda s: ua.disable(s, email))
    return {"email": ua.normalize_email(email), "role": ua.DISABLED}


@router.post("/{email}/enable")
async def enable_user(email: str, _: AdminUser, settings: SettingsDep, body: Enable | None = None) -> dict[str, Any]:
    password = body.password if body is not None and body.password else None
    generated = password is None
    password = password or ua.generate_password()
    await _run(settings, lambda s: ua.enable(s, email, password))
    out: dict[str, Any] = {"email": ua.normalize_email(email), "role": "user"}
    if generated:
        out["password"] = password  # shown this once; only its hash is kept
    return out


async def _user_by_email(session: Any, email: str) -> User:
    user = (await session.execute(select(User).where(User.email == ua.normalize_email(email)))).scalar_one_or_none()
    if user is None:
        raise ua.UserNotFound(f"no user with email {ua.normalize_email(email)}")
    return user


async def _budget_out(session: Any, user: User, settings: Any) -> dict[str, Any]:
    status_ = await budgets.budget_status(session, user.user_id, budgets.Defaults.from_settings(settings))
    return {"email": user.email, "user_id": user.user_id,
            "daily_usd": None if user.budget_daily_usd is None else float(user.budget_daily_usd),
            "monthly_usd": None if user.budget_monthly_usd is None else float(user.budget_monthly_usd), **status_}


@router.get("/{email}/budget")
async def get_budget(email: str, _: AdminUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    return await _budget_out(session, await _user_by_email(session, email), settings)


@router.put("/{email}/budget")
async def set_budget(email: str, body: BudgetChange, _: AdminUser, session: SessionDep,
                     settings: SettingsDep) -> dict[str, Any]:
    """Both fields are written: null = the server default (ZCBOT_USER_*_BUDGET_USD), 0 = no limit."""
    user = await _user_by_email(session, email)
    user.budget_daily_usd = None if body.daily_usd is None else Decimal(str(body.daily_usd))
    user.budget_monthly_usd = None if body.monthly_usd is None else Decimal(str(body.monthly_usd))
    await session.commit()
    return await _budget_out(session, user, settings)
