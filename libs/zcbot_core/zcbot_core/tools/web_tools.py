"""The `web_search` and `web_fetch` host tools (issue 25; seed 003 §3.4: network and key-bearing
tools run on the host, registered only when configured).

`WebTools` is built once per runner process from `HostToolSettings` (the provider's HTTP client
and the fetcher live as long as the runner); `register_web_tools` adds the tools to one run's
toolbox. Per-user limits and usage go through PostgreSQL, so they hold across runners:

- a search first takes the user's row lock, counts the user's `web_search` usage events of the
  last minute against `ZCBOT_WEB_SEARCH_PER_MINUTE`, and writes its own (cost
  `ZCBOT_WEB_SEARCH_COST_USD`, which budgets count) before the provider is called;
- a fetch writes a `web_fetch` event with the bytes read.

A long page is saved under the task folder's `sources/` (through `safe_fs`, counted against the
user's disk quota) with its URL and fetch time at the top, and the result names that file: the
original stays traceable (seed §8.2) while the conversation holds only the head.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import posixpath
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import quota, safe_fs
from zcbot_core.accounts.usage import record_tool_usage
from zcbot_core.db.models import UsageEvent, User
from zcbot_core.safe_fs import paths
from zcbot_core.tools.push_tool import PushHostTool as HostTool
from zcbot_core.tools.results import ToolOutcome, required_text
from zcbot_core.web.fetch import Fetched, Fetcher, FetchFailed, FetchLimits
from zcbot_core.web.search import SearchError, format_results, make_provider
from zcbot_core.web.settings import HostToolSettings
from zcbot_core.web.ssrf import FetchRefused, Policy, Resolver, system_resolver

log = logging.getLogger(__name__)
MAX_QUERY = 400
SOURCES_DIR = "sources"

WEB_SEARCH_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": "web_search",
    "description": ("Search the web. Returns a numbered list of results: title, link, date when known, snippet. "
                    "Use it to find sources; read a result with `web_fetch` before relying on it, and cite every "
                    "source you use by title and link."),
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to search for (keywords; the language of the sources wanted)."},
        "limit": {"type": "integer", "description": "How many results (default and maximum set by the operator)."},
    }, "required": ["query"]}}}

WEB_FETCH_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": "web_fetch",
    "description": ("Read a public web page or PDF as Markdown (main text, links kept). A long page is saved to "
                    "the task folder under sources/ and the result gives its path and the beginning; read more "
                    "of it with the file tools. Only public http(s) addresses are reachable."),
    "parameters": {"type": "object", "properties": {
        "url": {"type": "string", "description": "The http:// or https:// URL."},
    }, "required": ["url"]}}}


@dataclass
class WebTools:
    settings: HostToolSettings
    provider: Any  # web.search provider or None
    fetcher: Fetcher | None

    @classmethod
    def build(cls, settings: HostToolSettings, core: Any, *, resolver: Resolver = system_resolver) -> "WebTools":
        """`core`: the service's `Settings` (its database and NATS hosts are refused by `web_fetch`)."""
        fetcher = None
        if settings.fetch_enabled:
            policy = Policy.build(settings.deny_entries(), allow_loopback=settings.fetch_allow_loopback,
                                  service_urls=[getattr(core, "zcbot_db_url", None),
                                                getattr(core, "zcbot_nats_url", None)])
            fetcher = Fetcher(policy, FetchLimits(max_bytes=settings.fetch_max_bytes,
                                                  timeout=settings.fetch_timeout_seconds,
                                                  max_redirects=settings.fetch_max_redirects), resolver=resolver)
        return cls(settings=settings, provider=make_provider(settings), fetcher=fetcher)

    async def close(self) -> None:
        for part in (self.provider, self.fetcher):
            if part is not None:
                await part.close()


class RateLimited(Exception):
    pass


async def _count_search(session: AsyncSession, user_id: str, task_id: str, run_id: str,
                        settings: HostToolSettings) -> None:
    """Under the user's row lock: refuse over the per-minute limit, else record this search."""
    await session.execute(select(User.user_id).where(User.user_id == user_id).with_for_update())
    if settings.search_per_minute > 0:
        since = datetime.now(timezone.utc) - timedelta(minutes=1)
        recent = await session.scalar(select(func.count()).select_from(UsageEvent).where(
            UsageEvent.user_id == user_id, UsageEvent.kind == "web_search", UsageEvent.created_at >= since))
        if int(recent or 0) >= settings.search_per_minute:
            raise RateLimited()
    await record_tool_usage(session, user_id=user_id, task_id=task_id, run_id=run_id, kind="web_search",
                            units={"requests": 1}, cost_usd=settings.search_cost_usd)


def _source_name(url: str) -> str:
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", url.split("//", 1)[-1].split("/", 1)[0]).strip(".-")[:60] or "page"
    return f"{host}-{hashlib.sha256(url.encode()).hexdigest()[:10]}.md"


def _document(fetched: Fetched) -> str:
    page = fetched.page
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# {page.title or fetched.url}", "", f"Source: <{fetched.url}>", f"Fetched: {when}"]
    if page.date:
        head.append(f"Published: {page.date}")
    return "\n".join([*head, "", page.markdown or "(no readable text)"]) + "\n"


def register_web_tools(toolbox: Any, web: WebTools, sessions: async_sessionmaker[AsyncSession], *,
                       storage_root: Path, ledger: quota.Ledger | None) -> None:
    user_id, task_id, run_id = toolbox.user_id, toolbox.task_id, toolbox.run_id
    cwd = getattr(toolbox, "cwd", "") or ""
    settings = web.settings

    async def search(args: dict[str, Any]) -> ToolOutcome:
        query = required_text(args, "query", MAX_QUERY, "a non-empty string")
        if isinstance(query, ToolOutcome):
            return query
        limit = args.get("limit")
        count = settings.search_max_results
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            count = min(limit, settings.search_max_results)
        try:
            async with sessions() as session, session.begin():
                await _count_search(session, user_id, task_id, run_id, settings)
        except RateLimited:
            return ToolOutcome.failure(f"search limit reached ({settings.search_per_minute} per minute for this "
                                       "user); wait a minute or work with the sources found so far")
        try:
            results = await web.provider.search(query.strip(), count)
        except SearchError as exc:
            return ToolOutcome.failure(f"search failed: {exc}")
        return ToolOutcome.make(True, format_results(query.strip(), results))

    async def fetch(args: dict[str, Any]) -> ToolOutcome:
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            return ToolOutcome.failure("`url` is required (an http:// or https:// URL)")
        assert web.fetcher is not None
        try:
            fetched = await web.fetcher.fetch(url)
        except (FetchRefused, FetchFailed) as exc:
            return ToolOutcome.failure(str(exc))
        async with sessions() as session, session.begin():
            await record_tool_usage(session, user_id=user_id, task_id=task_id, run_id=run_id, kind="web_fetch",
                                    units={"bytes": fetched.size})
        document = _document(fetched)
        if len(document) <= settings.fetch_inline_chars:
            return ToolOutcome.make(True, document)
        rel = posixpath.join(SOURCES_DIR, _source_name(fetched.url))
        try:
            await asyncio.to_thread(_save, storage_root, user_id, cwd, rel, document.encode("utf-8"), ledger)
        except (paths.PathRejected, quota.DiskQuotaExceeded, OSError) as exc:
            return ToolOutcome.make(True, document[: settings.fetch_inline_chars]
                                    + f"\n\n[cut at {settings.fetch_inline_chars} of {len(document)} characters; "
                                      f"not saved: {exc}]")
        head = document[: settings.fetch_inline_chars]
        return ToolOutcome.make(True, f"saved the whole page ({len(document)} characters) to {rel} in the task "
                                      f"folder; the beginning:\n\n{head}\n\n[… continued in {rel}]")

    if web.provider is not None:
        toolbox.add_host_tool(HostTool(schema=WEB_SEARCH_SCHEMA, handler=search))
    if web.fetcher is not None:
        toolbox.add_host_tool(HostTool(schema=WEB_FETCH_SCHEMA, handler=fetch))


def _save(storage_root: Path, user_id: str, cwd: str, rel: str, data: bytes, ledger: quota.Ledger | None) -> None:
    target = paths.normalize_rel(posixpath.join(cwd, rel), allow_empty=False)
    user = paths.user_root(storage_root, user_id)
    with safe_fs.Root.open(user) as root:
        old = root.lstat(target)
        extra = len(data) - (old.st_size if old is not None else 0)
        if ledger is not None and extra > 0:
            ledger.reserve(user_id, extra, user)
        root.write_bytes(target, data, mkdirs=True)
