"""HTTP helpers shared by the routers and the files module: error shortcuts, free-text checks and
the list endpoints' paging bounds (no router imports another router for these)."""

from __future__ import annotations

from fastapi import HTTPException, status

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
MAX_PAGE = 1_000_000


def bad_request(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, detail=detail)


def conflict(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, detail=detail)


def not_found(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)


def clean_text(value: str | None, what: str) -> str | None:
    """Reject NUL (Postgres text cannot hold it) in free-text fields."""
    if value is not None and "\x00" in value:
        raise bad_request(f"{what} must not contain NUL")
    return value


def clean_label(value: str | None, what: str) -> str | None:
    """A short free-form label (skill): stripped, no control characters; empty -> None."""
    if value is None:
        return None
    value = value.strip()
    if any(ord(ch) < 32 for ch in value):
        raise bad_request(f"{what} must not contain control characters")
    return value or None
