"""Exception -> JSON response mapping. Every error body is `{"detail": ...}`.

- `HTTPException` (FastAPI/Starlette): passed through as `{"detail": <detail>}` with its headers.
- `RequestValidationError`: FastAPI's 422 shape (`detail` = list of `{type, loc, msg}`), built
  defensively so undecodable input (e.g. non-UTF-8 bytes) can never turn it into a 500.
- `zcbot_core.errors.ZcbotError` (the domain family, mapped here once; routes let it propagate):
  its `http_status`, `{"detail": exc.detail()}` and its `headers`. `PathRejected` is 400 (the
  caller's fault) or its own status (`zcbot_core.safe_fs` errors: 404 / 409 / 413).
- Database outage (`OperationalError`, pool timeout, invalidated connection): 503 + `Retry-After`.
  Other DB errors that only bad input can cause (`DataError` -> 400, `IntegrityError` -> 409).
- NATS unavailable (closed/reconnecting/no servers/no responders/timeouts, JetStream 503): 503.
- `ServiceUnavailable` (a `ZcbotError`; raise it from routes for any other dependency outage): 503.
- Anything else: 500 `{"detail": "internal server error"}`, logged with the traceback, which is
  never sent to the client.
"""

from __future__ import annotations

import logging
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from zcbot_core.errors import RETRY_AFTER, ZcbotError

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


def is_db_outage(exc: BaseException) -> bool:
    """True for failures that mean "the database is unreachable", not "your query is wrong"."""
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.TimeoutError)):
        return True
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, sa_exc.InterfaceError)


def _json(status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": _safe(detail)}, status_code=status, headers=headers)


async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = getattr(exc, "headers", None)
    return _json(exc.status_code, exc.detail, dict(headers) if headers else None)


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


async def validation_exception_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for err in exc.errors():
        item: dict[str, Any] = {
            "type": _safe(err.get("type")),
            "loc": _safe(list(err.get("loc", ()))),
            "msg": _safe(err.get("msg")),
        }
        if "input" in err and err.get("type") != "json_invalid":
            item["input"] = _safe(err["input"])
        if err.get("ctx"):
            item["ctx"] = _safe(err["ctx"])
        errors.append(item)
    return _json(422, errors)


async def domain_error_handler(request: Request, exc: ZcbotError) -> JSONResponse:
    """The one mapping of the domain family: the class says the status, the text and the headers."""
    return _json(exc.http_status, exc.detail(), dict(exc.headers) or None)


async def db_error_handler(request: Request, exc: sa_exc.DBAPIError) -> JSONResponse:
    if is_db_outage(exc):
        log.warning("database unavailable", extra={"path": request.url.path, "error": type(exc.orig).__name__})
        return _json(503, "database unavailable; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS})
    if isinstance(exc, sa_exc.DataError):
        return _json(400, "invalid value for the database (too long or malformed)")
    if isinstance(exc, sa_exc.IntegrityError):
        return _json(409, "conflicts with existing data")
    return await unhandled_exception_handler(request, exc)


async def pool_timeout_handler(request: Request, exc: sa_exc.TimeoutError) -> JSONResponse:
    log.warning("database pool exhausted", extra={"path": request.url.path})
    return _json(503, "database busy; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS})


async def nats_unavailable_handler(request: Request, exc: Exception) -> JSONResponse:
    log.warning("message bus unavailable", extra={"path": request.url.path, "error": type(exc).__name__})
    return _json(503, "message bus unavailable; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS})


async def unhandled_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc, extra={"path": request.url.path, "method": request.method})
    return _json(500, "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_exception_handler)  # type: ignore[arg-type]
    app.add_exception_handler(ZcbotError, domain_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(sa_exc.DBAPIError, db_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(sa_exc.TimeoutError, pool_timeout_handler)  # type: ignore[arg-type]
    for exc_type in NATS_UNAVAILABLE:
        app.add_exception_handler(exc_type, nats_unavailable_handler)
    app.add_exception_handler(Exception, unhandled_exception_handler)
