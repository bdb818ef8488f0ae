"""JSON-lines logging for every service, with secret redaction as a last line of defence."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PRIVATE)", re.I)
_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# The service a log record comes from when one process hosts several (`zcbot up`): each service's
# task sets it (asyncio tasks and `to_thread` inherit it); unset, the formatter's own name is used.
current_service: ContextVar[str | None] = ContextVar("zcbot_service", default=None)


def secret_values(*environs: Mapping[str, str]) -> list[str]:
    """Values of secret-looking variables of the process's environment and of `environs` (the
    hosted services' own): they must never appear in a log line. Longest first."""
    # raw: every secret-looking variable, also those no settings class declares (a provider's key)
    found = {v for env in (os.environ, *environs) for k, v in env.items() if _SECRET_ENV.search(k) and v and len(v) >= 8}
    return sorted(found, key=len, reverse=True)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str, secrets: Iterable[str] | None = None) -> None:
        super().__init__()
        self.service = service
        self.secrets = list(secrets) if secrets is not None else secret_values()  # longest first

    def redact(self, text: str) -> str:
        for value in self.secrets:
            if value in text:
                text = text.replace(value, "[redacted]")
        return text

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "service": current_service.get() or self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return self.redact(json.dumps(body, ensure_ascii=False, default=str))


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet_noisy_loggers()


def quiet_noisy_loggers() -> None:
    """Libraries that log every request at INFO: warnings and above only."""
    for noisy in ("LiteLLM", "litellm", "httpx", "uvicorn.access", "nats"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
