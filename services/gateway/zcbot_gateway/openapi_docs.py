"""The OpenAPI document's error answers: every operation lists the error statuses it can give, each
with the one problem shape (`errors.problem`, RFC 9457, `application/problem+json`).

Which statuses an operation gives is derived from the operation, so a new route is documented
without anyone remembering to: signed-in (401), admin (403), a path parameter (404: the caller's
resource or nothing), any input (400 from the domain checks, 422 from validation), and every route
may answer 503 (database or bus outage). What only some routes do (409, 413, 415, 429, 502, 507)
is named in `EXTRA` next to the path, and a route's own `responses=` still wins.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from zcbot_gateway.errors import MAX_DETAIL, MAX_ERRORS, PROBLEM_JSON


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str = Field(max_length=200, description="in the request's language: Chinese unless Accept-Language "
                                                 "starts with en")
    type: str = Field(description="pydantic's error type, e.g. string_too_long (the same in every language)")


class Problem(BaseModel):
    """RFC 9457 problem details: the body of every non-2xx answer."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str = Field(max_length=MAX_DETAIL, description="human-readable, at most 500 characters")
    code: str = Field(description="stable machine-readable code, e.g. task_not_found, validation_error")
    errors: list[FieldError] | None = Field(default=None, max_length=MAX_ERRORS,
                                            description="422 only: one entry per invalid field")


DESCRIPTIONS = {
    400: "Bad request (a domain rule refused the input)",
    401: "Not signed in, or the token expired or was revoked",
    403: "Forbidden",
    404: "Not found (or not yours)",
    409: "Conflicts with the current state",
    413: "Too large",
    415: "Unsupported media type",
    422: "Validation failed (unknown or out-of-range values included)",
    429: "Too many requests, or a quota or budget is used up",
    502: "An upstream service answered badly",
    503: "A backing service is unavailable; retry (Retry-After)",
    507: "Disk quota exceeded",
}

# Statuses only some operations give, by "METHOD path".
EXTRA: dict[str, tuple[int, ...]] = {
    "POST /v1/auth/login": (403, 429),
    "POST /v1/auth/login_password": (403, 429),
    "POST /v1/auth/change_password": (403, 429),
    "POST /v1/me/password": (403, 429),
    "POST /v1/tasks": (409, 429),
    "PATCH /v1/tasks/{task_id}": (409,),
    "DELETE /v1/tasks/{task_id}": (409,),
    "POST /v1/tasks/{task_id}/restore": (409,),
    "POST /v1/tasks/{task_id}/messages": (409, 429),
    "POST /v1/tasks/{task_id}/cancel": (409,),
    "POST /v1/files/upload": (409, 413, 507),
    "POST /v1/files/mkdir": (409, 507),
    "POST /v1/files/delete": (404, 409),
    "POST /v1/files/rename": (404, 409),
    "GET /v1/files/download": (404, 413),
    "GET /v1/files/preview": (404, 413, 415),
    "PUT /v1/channels/wecom": (409, 429, 502),
    "POST /v1/channels/ilink/login": (409, 502),
    "GET /v1/channels/ilink/login": (409, 502),
    "POST /v1/admin/users": (409,),
    "PUT /v1/admin/users/{email}/role": (409,),
    "POST /v1/admin/users/{email}/disable": (409,),
    "POST /v1/procs/{proc_id}/kill": (409,),
}


def error_statuses(method: str, path: str, op: dict[str, Any]) -> list[int]:
    """The error statuses of one operation, read from the operation itself (FastAPI's routes are
    not a flat list to walk): its security (401), the admin tag (403), path parameters (404), any
    input (400, 422), plus `EXTRA`."""
    params = op.get("parameters", [])
    codes = {503}
    if op.get("security"):
        codes.add(401)
    if "admin" in op.get("tags", []):
        codes.add(403)
    if any(p.get("in") == "path" for p in params):
        codes.add(404)
    if params or "requestBody" in op:
        codes |= {400, 422}
    codes |= set(EXTRA.get(f"{method.upper()} {path}", ()))
    return sorted(codes)


def install_openapi(app: FastAPI) -> None:
    """Replace `app.openapi` with one that documents the problem answers of every operation."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}))
        schemas["Problem"] = problem
        ref = {"$ref": "#/components/schemas/Problem"}
        for path, item in doc.get("paths", {}).items():
            for method, op in item.items():
                if not isinstance(op, dict) or "responses" not in op:
                    continue
                responses = op["responses"]
                responses.pop("422", None)  # FastAPI's own 422 shape is not what the server sends
                for status in error_statuses(method, path, op):
                    if str(status) in responses:
                        continue  # the route documented this one itself
                    responses[str(status)] = {"description": DESCRIPTIONS.get(status, "Error"),
                                              "content": {PROBLEM_JSON: {"schema": ref}}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
