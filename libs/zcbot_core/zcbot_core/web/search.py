"""Web search providers behind one interface (`SearchProvider.search(query, limit)`).

- `SearxngProvider`: a self-hosted SearXNG instance's JSON API (`GET /search?format=json`), no key:
  the natural default for self-hosters.
- `TavilyProvider`: Tavily's `POST /search` (Bearer key).
- `BochaProvider`: Bocha's `POST /v1/web-search` (Bearer key; reachable from mainland China).

The keyed providers send the key only in the `Authorization` header; every error text that could
carry it (a provider echoing the request) is scrubbed (`SearchError` never holds it), and httpx's
own request log line names only the URL, which holds no key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from zcbot_core.errors import ZcbotError
from zcbot_core.web.settings import HostToolSettings


class SearchError(ZcbotError):
    """The provider failed or answered something unreadable (a tool error, never a crash)."""

    code = "web_search_failed"
    http_status = 502


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    date: str | None = None


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, limit: int) -> list[SearchResult]: ...


def _text(value: Any, limit: int = 600) -> str:
    return " ".join(str(value or "").split())[:limit]


class _HttpProvider:
    name = "base"

    def __init__(self, base_url: str, timeout: float, key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = key
        # trust_env=False: an operator's HTTP(S)_PROXY for sandboxes is not the search path
        self._http = httpx.AsyncClient(timeout=timeout, trust_env=False, transport=transport)

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            response = await self._http.request(method, self.base_url + path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            raise SearchError(self._scrub(f"{self.name} unreachable: {exc.__class__.__name__}: {exc}"[:300])) from None
        if response.status_code != 200:
            raise SearchError(self._scrub(f"{self.name} answered HTTP {response.status_code}: {response.text[:200]}"))
        try:
            return response.json()
        except ValueError:
            raise SearchError(f"{self.name} answered something that is not JSON") from None

    async def close(self) -> None:
        await self._http.aclose()


def _rows(rows: Any, limit: int, provider: str, where: str, *, title: str = "title", snippet: tuple[str, ...] = ("content",),
          date: tuple[str, ...] = ()) -> list[SearchResult]:
    """A provider's result list as `SearchResult`s, by the provider's own field names."""
    if not isinstance(rows, list):
        raise SearchError(f"{provider} answered without {where}")

    def first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
        return next((row[k] for k in keys if row.get(k)), None)

    return [SearchResult(title=_text(r.get(title), 200), url=str(r["url"]), snippet=_text(first(r, snippet)),
                         date=first(r, date)) for r in rows[:limit] if isinstance(r, dict) and r.get("url")]


class SearxngProvider(_HttpProvider):
    name = "searxng"

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        data = await self._json("GET", "/search", params={"q": query, "format": "json"})
        rows = data.get("results") if isinstance(data, dict) else None
        return _rows(rows, limit, self.name, "a `results` list (is its JSON format enabled?)", date=("publishedDate",))


class TavilyProvider(_HttpProvider):
    name = "tavily"

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        data = await self._json("POST", "/search", json={"query": query, "max_results": limit,
                                                          "search_depth": "basic"})
        rows = data.get("results") if isinstance(data, dict) else None
        return _rows(rows, limit, self.name, "a `results` list", date=("published_date",))


class BochaProvider(_HttpProvider):
    name = "bocha"

    async def search(self, query: str, limit: int) -> list[SearchResult]:
        data = await self._json("POST", "/v1/web-search", json={"query": query, "count": limit, "summary": True,
                                                                 "freshness": "noLimit"})
        if not isinstance(data, dict) or data.get("code") not in (200, "200", None):
            raise SearchError(f"bocha answered code {data.get('code') if isinstance(data, dict) else '?'}")
        pages = ((data.get("data") or {}).get("webPages") or {}).get("value")
        return _rows(pages, limit, self.name, "`data.webPages.value`", title="name", snippet=("summary", "snippet"),
                     date=("datePublished", "dateLastCrawled"))


def make_provider(settings: HostToolSettings,
                  transport: httpx.AsyncBaseTransport | None = None) -> _HttpProvider | None:
    """The configured provider, or None (then `web_search` is not registered)."""
    chosen = settings.chosen_provider()
    timeout = settings.search_timeout_seconds
    if chosen == "searxng" and settings.searxng_url:
        return SearxngProvider(settings.searxng_url, timeout, transport=transport)
    if chosen == "tavily" and settings.tavily_api_key:
        return TavilyProvider(settings.tavily_url, timeout, settings.key("tavily"), transport=transport)
    if chosen == "bocha" and settings.bocha_api_key:
        return BochaProvider(settings.bocha_url, timeout, settings.key("bocha"), transport=transport)
    return None


def format_results(query: str, results: list[SearchResult]) -> str:
    """What the model reads: a numbered list it can cite (title, link, date, snippet)."""
    if not results:
        return f"no results for {query!r}"
    lines = [f"{len(results)} results for {query!r} (cite them by title and link; `web_fetch` reads a page):"]
    for i, r in enumerate(results, 1):
        date = f" ({r.date})" if r.date else ""
        lines.append(f"{i}. [{r.title or r.url}]({r.url}){date}\n   {r.snippet}")
    return "\n".join(lines)
