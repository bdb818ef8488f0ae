"""HTTP helpers shared by the routers and the files module: error shortcuts, free-text checks and
the list endpoints' paging bounds (no router imports another router for these)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query, status
from fastapi.exceptions import RequestValidationError

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class Paging:
    """One list page asked for: `page` (1-based) and `page_size`, both already in range (the
    query declares the bounds, so an out-of-range value is FastAPI's 422, never clamped)."""

    page: int
    page_size: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.page_size

    def envelope(self, items: Sequence[Any], total: int, **extra: Any) -> dict[str, Any]:
        """THE list shape: `{items, total, page, page_size, ...extra}` (items: this page only)."""
        return {"items": list(items), "total": total, "page": self.page, "page_size": self.page_size, **extra}

    def slice(self, rows: Sequence[Any], **extra: Any) -> dict[str, Any]:
        """The envelope of an in-memory list (the whole list in `rows`)."""
        return self.envelope(rows[self.offset:self.offset + self.page_size], len(rows), **extra)


def paging(default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> Callable[..., Paging]:
    """A dependency for a list route's `page` / `page_size` query parameters with these bounds."""

    def dependency(page: int, page_size: int) -> Paging:
        return Paging(page, page_size)

    # Real annotation objects (this module's annotations are strings that FastAPI would resolve
    # without the closure's `maximum`).
    dependency.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("page", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
            int, Query(ge=1, le=MAX_PAGE, description="1-based page number")]),
        inspect.Parameter("page_size", inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[
            int, Query(ge=1, le=maximum, description=f"items per page (1..{maximum})")]),
    ], return_annotation=Paging)
    return dependency


def PagingDep(default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> Any:  # noqa: N802 (a type alias)
    return Annotated[Paging, Depends(paging(default, maximum))]


def invalid_query(name: str, *, zh: str, en: str) -> RequestValidationError:
    """An unknown or out-of-range query value: the same 422 as any other validation failure. It
    says itself in both languages (`ctx["msg_zh"]`, read by `validation_texts.message`): no table
    can translate a sentence a route wrote."""
    return RequestValidationError([{"loc": ("query", name), "msg": en, "type": "value_error",
                                    "ctx": {"msg_zh": zh}}])


def one_of(name: str, value: str | None, allowed: Sequence[str]) -> list[str]:
    """A comma-separated query filter whose every item must be one of `allowed` (else 422)."""
    if value is None:
        return []
    items = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in items if v not in allowed]
    if unknown or not items:
        raise invalid_query(name, zh=f"须为以下值（可用逗号分隔多个）：{'、'.join(allowed)}",
                            en=f"must be a comma-separated list of {', '.join(allowed)}")
    return items


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
