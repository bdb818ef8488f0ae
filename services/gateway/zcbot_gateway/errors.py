"""Exception -> JSON response mapping: every non-2xx answer is ONE shape, RFC 9457 problem details
(`application/problem+json`): `{type, title, status, detail, code}`, plus `errors` on a 422.
`detail` is always a string of at most `MAX_DETAIL` characters (clients that read `.detail` keep
working); `errors` (422 only) lists at most `MAX_ERRORS` `{loc, msg, type}` and never echoes the
input, so a 5000-character field never comes back. `openapi_docs.py` documents the shape per route.

- `HTTPException` (FastAPI/Starlette): passed through as `{"detail": <detail>}` with its headers.
- `RequestValidationError`: 422, `errors` = `{loc, msg, type}` per field (capped), `detail` the first
  message, the texts in the request's language (`validation_texts.py`); built defensively so
  undecodable input (e.g. non-UTF-8 bytes) can never become a 500.
- `zcbot_core.errors.ZcbotError` (the domain family, mapped here once; routes let it propagate):
  its `http_status`, `detail` = `exc.detail()`, `code` = `exc.code` and its `headers`. `PathRejected` is 400 (the
  caller's fault) or its own status (`zcbot_core.safe_fs` errors: 404 / 409 / 413).
- Database outage (`OperationalError`, pool timeout, invalidated connection): 503 + `Retry-After`.
  Other DB errors that only bad input can cause (`DataError` -> 400, `IntegrityError` -> 409).
- NATS unavailable (closed/reconnecting/no servers/no responders/timeouts, JetStream 503): 503.
- `ServiceUnavailable` (a `ZcbotError`; raise it from routes for any other dependency outage): 503.
- Anything else: 500 `detail: "internal server error"`, logged with the traceback, which is
  never sent to the client.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from zcbot_core.db.outage import is_db_outage
from zcbot_core.errors import RETRY_AFTER, ZcbotError
from zcbot_gateway import validation_texts
from zcbot_gateway.lang import lang_of

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = RETRY_AFTER["Retry-After"]


class ServiceUnavailable(ZcbotError):
    """A backing service (DB, bus, executor, ...) is unreachable: the request may be retried (503)."""

    code, http_status, headers = "service_unavailable", 503, RETRY_AFTER

    def __init__(self, detail: str = "service temporarily unavailable; retry shortly") -> None:
        super().__init__(detail)


NATS_UNAVAILABLE: tuple[type[BaseException], ...] = (
    nats_errors.ConnectionClosedError,
    nats_errors.ConnectionDrainingError,
    nats_errors.ConnectionReconnectingError,
    nats_errors.NoServersError,
    nats_errors.StaleConnectionError,
    nats_errors.OutboundBufferLimitError,
    nats_errors.FlushTimeoutError,
    nats_errors.NoRespondersError,
    nats_errors.TimeoutError,
    js_errors.ServiceUnavailableError,
    js_errors.NoStreamResponseError,
)


PROBLEM_JSON = "application/problem+json"
MAX_DETAIL = 500
MAX_ERRORS = 20
MAX_MSG = 200
MAX_LOC = 10


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(status: int, detail: Any, headers: dict[str, str] | None = None, *, code: str | None = None,
            errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    """The one error response. `detail` may be anything an `HTTPException` carried: it becomes text."""
    text = detail if isinstance(detail, str) else json.dumps(_safe(detail), ensure_ascii=False, default=str)
    body: dict[str, Any] = {"type": "about:blank", "title": _title(status), "status": status,
                            "detail": _clip(_safe(text) or _title(status), MAX_DETAIL),
                            "code": code or _title(status).lower().replace(" ", "_").replace("-", "_")}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = getattr(exc, "headers", None)
    return problem(exc.status_code, exc.detail, dict(headers) if headers else None)


def _safe(value: Any) -> Any:
    """Make an error detail JSON-safe: bytes are decoded lossily, odd objects stringified, and text
    that cannot be UTF-8 encoded (lone surrogates from JSON `\\ud800` escapes, echoed back as the
    invalid `input`) has those characters replaced, so rendering the error can never become a 500."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    return str(value)


def _loc_part(part: Any) -> str | int:
    return part if isinstance(part, int) and not isinstance(part, bool) else _clip(str(_safe(part)), 100)


async def validation_exception_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Texts in the request's language (`validation_texts`); `loc` and `type` as pydantic said."""
    lang = lang_of(request.headers.get("accept-language"))
    raw = exc.errors()
    errors = []
    for err in raw[:MAX_ERRORS]:
        loc = [_loc_part(p) for p in list(err.get("loc", ()))[:MAX_LOC]]
        errors.append({"loc": loc, "msg": _clip(str(_safe(validation_texts.message(err, loc, lang))), MAX_MSG),
                       "type": _clip(str(_safe(err.get("type", ""))), 100)})
    detail = validation_texts.summary(errors[0] if errors else None, len(raw), lang)
    return problem(422, detail, code="validation_error", errors=errors)


async def domain_error_handler(request: Request, exc: ZcbotError) -> JSONResponse:
    """The one mapping of the domain family: the class says the status, the text and the headers."""
    return problem(exc.http_status, exc.detail(), dict(exc.headers) or None, code=exc.code)


async def db_error_handler(request: Request, exc: sa_exc.DBAPIError) -> JSONResponse:
    if is_db_outage(exc):
        log.warning("database unavailable", extra={"path": request.url.path, "error": type(exc.orig).__name__})
        return problem(503, "database unavailable; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS},
                       code="database_unavailable")
    if isinstance(exc, sa_exc.DataError):
        return problem(400, "invalid value for the database (too long or malformed)", code="invalid_value")
    if isinstance(exc, sa_exc.IntegrityError):
        return problem(409, "conflicts with existing data", code="conflict")
    return await unhandled_exception_handler(request, exc)


async def pool_timeout_handler(request: Request, exc: sa_exc.TimeoutError) -> JSONResponse:
    log.warning("database pool exhausted", extra={"path": request.url.path})
    return problem(503, "database busy; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS}, code="database_busy")


async def nats_unavailable_handler(request: Request, exc: Exception) -> JSONResponse:
    log.warning("message bus unavailable", extra={"path": request.url.path, "error": type(exc).__name__})
    return problem(503, "message bus unavailable; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS},
                   code="bus_unavailable")


async def unhandled_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc, extra={"path": request.url.path, "method": request.method})
    return problem(500, "internal server error", code="internal_error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_exception_handler)  # type: ignore[arg-type]
    app.add_exception_handler(ZcbotError, domain_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(sa_exc.DBAPIError, db_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(sa_exc.TimeoutError, pool_timeout_handler)  # type: ignore[arg-type]
    for exc_type in NATS_UNAVAILABLE:
        app.add_exception_handler(exc_type, nats_unavailable_handler)
    app.add_exception_handler(Exception, unhandled_exception_handler)
