"""Admin user routes: the operations of `zcbot user` with the same rules (zcbot_core.users_admin:
no silent overwrite of an existing email, never without an admin). `require_admin` gates them all.

- `GET /v1/admin/users` -> `{count, results: [{user_id, email, role, has_password, created_at}]}`
- `POST /v1/admin/users {email, password, role?, update?}` -> 201 `{user_id, email, changes}`;
  an existing email without `update: true` -> 409.
- `PUT /v1/admin/users/{email}/role {role}` -> `{email, role, previous_role}`
- `PUT /v1/admin/users/{email}/password {password}` -> `{email, password_changed: true}`
- `POST /v1/admin/users/{email}/disable` -> `{email, role: "disabled"}`
Unknown email -> 404; taking the last admin away -> 409; a weak password -> 400. A password or role
change revokes the user's older tokens (the token_version trigger). Each operation runs in a worker
thread on its own connection (bcrypt must not block the event loop).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from zcbot_core import users_admin as ua
from zcbot_core.config import ConfigError

from zcbot_gateway.deps import AdminUser, SettingsDep

router = APIRouter(prefix="/v1/admin/users", tags=["admin"])

Role = Literal["user", "admin"]


class NewUser(BaseModel):
    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=1, max_length=200)
    role: Role = "user"
    update: bool = False


class RoleChange(BaseModel):
    role: Role


class PasswordChange(BaseModel):
    password: str = Field(min_length=1, max_length=200)


async def _run(settings: Any, op: Any) -> Any:
    if not settings.zcbot_db_url:
        raise ConfigError("database not configured (ZCBOT_DB_URL)")
    return await run_in_threadpool(ua.with_session, settings.zcbot_db_url, op)


@router.get("")
async def list_users(_: AdminUser, settings: SettingsDep) -> dict[str, Any]:
    users = await _run(settings, ua.list_users)
    return {"count": len(users), "results": [asdict(u) for u in users]}


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
