"""The domain error family: every error the project raises on purpose derives from `ZcbotError`.

Each class carries a stable `code` (for logs and tests) and the `http_status` it means at the HTTP
edge; the gateway maps the whole family once (zcbot_gateway/errors.py), so a route lets a domain
error propagate instead of catching it only to rebuild it as an `HTTPException`. Other callers turn
the same errors into tool errors for the model (their `str()` is the message) or refuse to start
(`ConfigError`).

`str(exc)` is the user-facing message as the raise site wrote it (Chinese where it is Chinese);
`public_detail`, when a class sets it, replaces it in API responses, for errors whose raise sites
write diagnostics rather than a message for the client.
"""

from __future__ import annotations

from typing import ClassVar


class ZcbotError(Exception):
    """Base of the family; subclasses set `code` and `http_status` (class or instance attributes)."""

    code: ClassVar[str] = "error"
    http_status: int = 500
    # Shown to API clients instead of str(self) when set (see the module docstring).
    public_detail: ClassVar[str | None] = None
    # Extra response headers at the HTTP edge (e.g. Retry-After on a 503).
    headers: ClassVar[dict[str, str]] = {}

    def detail(self) -> str:
        """What an API response says about this error."""
        return self.public_detail or str(self) or self.code.replace("_", " ")


# A 503 tells the client when to try again (the gateway's other outage answers say the same).
RETRY_AFTER: dict[str, str] = {"Retry-After": "5"}


class PreviewError(ZcbotError):
    """A file preview the gateway cannot give (zcbot_gateway/previews.py); the message says why."""

    code, http_status = "preview_failed", 422


class PreviewUnavailable(PreviewError):
    """LibreOffice (`soffice`) is not installed on the host: office files cannot be previewed."""

    code, http_status = "preview_unavailable", 503


class PreviewUnsupported(PreviewError):
    code, http_status = "preview_unsupported", 415


class PreviewTooLarge(PreviewError):
    code, http_status = "preview_too_large", 413
