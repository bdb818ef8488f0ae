"""Keep channel credentials out of log lines written by libraries we call.

httpx logs every request URL at INFO ("HTTP Request: GET https://...?corpsecret=..."); WeCom puts
the corp secret and the access token in the query string by protocol. `install_httpx_redaction()`
adds a filter to the `httpx` logger that masks those query values. `safe_url`/`safe_error` give
loggable forms of URLs and HTTP exceptions for our own log lines.
"""

from __future__ import annotations

import logging
import re

SENSITIVE_PARAMS = ("access_token", "corpsecret", "secret", "encrypted_query_param", "qrcode", "filekey", "token")
_QUERY_RE = re.compile(r"([?&](?:%s)=)[^&#\s\"']*" % "|".join(SENSITIVE_PARAMS), re.IGNORECASE)


def safe_url(url: object) -> str:
    return _QUERY_RE.sub(r"\1***", str(url))


def safe_error(exc: BaseException) -> str:
    """Class name plus a redacted message (httpx errors embed the URL)."""
    return f"{exc.__class__.__name__}: {safe_url(exc)}"[:300]


class _RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = safe_url(record.msg)
        if record.args:
            if isinstance(record.args, tuple):
                record.args = tuple(safe_url(a) if not isinstance(a, (int, float)) else a for a in record.args)
            elif isinstance(record.args, dict):
                record.args = {k: safe_url(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


_FILTER = _RedactFilter()


def install_httpx_redaction() -> None:
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
