"""JSON-lines logging for every service, with secret redaction as a last line of defence."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PRIVATE)", re.I)
_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _secret_values() -> list[str]:
    """Values of secret-looking env vars: they must never appear in a log line."""
    return sorted(
        # raw: every secret-looking variable, also those no settings class declares (a provider's key)
        (v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 8),
        key=len,
        reverse=True,
    )


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service
        self._secrets = _secret_values()

    def redact(self, text: str) -> str:
        for value in self._secrets:
            if value in text:
                text = text.replace(value, "[redacted]")
        return text

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "service": self.service,
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
    for noisy in ("LiteLLM", "litellm", "httpx", "uvicorn.access", "nats"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
