"""`Fetcher.fetch(url)`: one page (or PDF) over HTTP(S), SSRF-checked at every hop (`ssrf.Policy`),
within a byte limit, a time limit and a set of content types, then turned into Markdown
(`extract.to_markdown`).

Each hop: the URL is parsed (http/https only, no credentials in it), its host resolved and checked
once, and the request sent to the checked IP itself with the original `Host` header and TLS server
name (`sni_hostname`), so the certificate is still verified for the name. Redirects are followed
by hand, each one going through the same check. `trust_env=False`: no proxy from the environment
can route around the check.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from zcbot_core.errors import ZcbotError
from zcbot_core.web.extract import ALLOWED_TYPES, Extracted, to_markdown
from zcbot_core.web.ssrf import FetchRefused, Policy, Resolver, system_resolver

USER_AGENT = "zcbot-web-fetch/1.0 (+https://github.com/zcbot)"
REDIRECTS = {301, 302, 303, 307, 308}


class FetchFailed(ZcbotError):
    """The page could not be read (network, HTTP status, size, type, time): a tool error."""

    code = "web_fetch_failed"
    http_status = 502


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = 10 * 1024 * 1024
    timeout: float = 20.0
    max_redirects: int = 5


@dataclass
class Fetched:
    url: str  # the final URL, after redirects
    content_type: str
    size: int
    page: Extracted


def _checked_url(raw: str) -> httpx.URL:
    try:
        url = httpx.URL(raw.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchRefused(f"not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https"):
        raise FetchRefused("only http:// and https:// URLs can be fetched")
    if not url.host:
        raise FetchRefused("the URL has no host")
    if url.userinfo:
        raise FetchRefused("URLs with credentials (user:password@) are not fetched")
    return url


class Fetcher:
    def __init__(self, policy: Policy, limits: FetchLimits, resolver: Resolver = system_resolver,
                 verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: the TLS trust (tests pass a context trusting their own CA)."""
        self.policy = policy
        self.limits = limits
        self.resolver = resolver
        # No keep-alive: the pool is keyed by (scheme, IP, port), so a kept connection would carry a
        # request for another name to the same address over TLS verified for the first name.
        transport = httpx.AsyncHTTPTransport(verify=verify, limits=httpx.Limits(max_keepalive_connections=0))
        self._http = httpx.AsyncClient(trust_env=False, follow_redirects=False, transport=transport,
                                       timeout=httpx.Timeout(limits.timeout))

    async def close(self) -> None:
        await self._http.aclose()

    async def fetch(self, raw_url: str) -> Fetched:
        try:
            async with asyncio.timeout(self.limits.timeout):
                return await self._fetch(raw_url)
        except TimeoutError:
            raise FetchFailed(f"the fetch took longer than {self.limits.timeout:g} s") from None

    async def _fetch(self, raw_url: str) -> Fetched:
        url = _checked_url(raw_url)
        for _hop in range(self.limits.max_redirects + 1):
            port = url.port or (443 if url.scheme == "https" else 80)
            ip = await self.policy.pin(url.host, port, self.resolver)
            location, body, content_type = await self._one(url, ip)
            if location is None:
                page = await asyncio.to_thread(to_markdown, body, content_type, str(url))
                return Fetched(url=str(url), content_type=content_type, size=len(body), page=page)
            url = _checked_url(urljoin(str(url), location))
        raise FetchFailed(f"more than {self.limits.max_redirects} redirects")

    async def _one(self, url: httpx.URL, ip: str) -> tuple[str | None, bytes, str]:
        """(redirect location, body, content type) of one request sent to the pinned `ip`."""
        host_header = url.netloc.decode("ascii")
        target = url.copy_with(host=ip)
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        request = self._http.build_request("GET", target, headers={
            "Host": host_header, "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml,application/pdf,text/plain;q=0.9,*/*;q=0.1"},
            extensions=extensions)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise FetchFailed(f"could not fetch {urlsplit(str(url)).netloc}: {exc.__class__.__name__}") from None
        try:
            if response.status_code in REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise FetchFailed(f"HTTP {response.status_code} without a Location header")
                return location, b"", ""
            if response.status_code != 200:
                raise FetchFailed(f"HTTP {response.status_code} from {url.host}")
            content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type not in ALLOWED_TYPES:
                raise FetchFailed(f"content type {content_type or '(none)'} is not fetched "
                                  f"(HTML, plain text, Markdown, JSON, XML and PDF are)")
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.limits.max_bytes:
                raise FetchFailed(f"the page is {int(declared)} bytes; the limit is {self.limits.max_bytes}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.limits.max_bytes:
                    raise FetchFailed(f"the page is larger than the limit of {self.limits.max_bytes} bytes")
                chunks.append(chunk)
            return None, b"".join(chunks), content_type
        except httpx.HTTPError as exc:
            raise FetchFailed(f"the download broke off: {exc.__class__.__name__}") from None
        finally:
            await response.aclose()
