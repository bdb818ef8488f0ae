"""`web_fetch`'s fetcher against a real HTTP server on loopback: pages and PDFs become Markdown,
and every way to reach an address it must not (a literal, a name resolving to one, a redirect to
one) is refused before any connection there.

The loopback fixture needs the test-only override (`allow_loopback`, which `HostToolSettings`
refuses in production); the refusal tests run without it. Names are resolved by a resolver hook
(no /etc/hosts edits, no DNS)."""

from __future__ import annotations

import ipaddress

import pytest

from tests.helpers.fake_web import FakeWeb, fake_web  # noqa: F401  (fixture)
from tests.helpers.tls import make_ca_and_server_cert
from zcbot_core.platform.config import ConfigError
from zcbot_core.web.fetch import Fetcher, FetchFailed, FetchLimits
from zcbot_core.web.settings import HostToolSettings
from zcbot_core.web.ssrf import FetchRefused, Policy, address_problem


class Names:
    """A resolver hook: a fixed table, counting the look-ups (the fetch must resolve once per hop)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table, self.calls = table, []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(-2, "Name or service not known")
        return self.table[host]


def fetcher(allow_loopback: bool = False, names: Names | None = None, **limits: float) -> Fetcher:
    return Fetcher(Policy(allow_loopback=allow_loopback), FetchLimits(**limits),  # type: ignore[arg-type]
                   resolver=names or Names({}))


async def test_a_local_page_becomes_markdown_with_its_links(fake_web: FakeWeb) -> None:
    f = fetcher(allow_loopback=True)
    got = await f.fetch(f"{fake_web.base_url}/article")
    await f.close()
    assert got.page.title == "Solar output hits record"
    assert "record solar generation in May" in got.page.markdown
    assert "https://grid.example.com/bulletin-may" in got.page.markdown  # links kept for citations
    assert "Copyright" not in got.page.markdown  # boilerplate dropped by the extractor
    assert got.content_type == "text/html" and got.url.endswith("/article")


async def test_a_pdf_becomes_text(fake_web: FakeWeb) -> None:
    f = fetcher(allow_loopback=True)
    got = await f.fetch(f"{fake_web.base_url}/report.pdf")
    await f.close()
    assert "Quarterly revenue grew 18 percent" in got.page.markdown


async def test_the_request_goes_to_the_pinned_address_with_the_name_in_host(fake_web: FakeWeb) -> None:
    names = Names({"news.example": ["127.0.0.1"]})
    f = fetcher(allow_loopback=True, names=names)
    got = await f.fetch(f"http://news.example:{fake_web.port}/article")
    await f.close()
    assert names.calls == ["news.example"]  # resolved once; the connection used that answer
    [hit] = fake_web.hits_on("/article")
    assert hit["headers"]["Host"] == f"news.example:{fake_web.port}"
    assert got.url == f"http://news.example:{fake_web.port}/article"


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}/article", "http://[::1]:{port}/article",
                                 "http://localhost:{port}/article", "http://0.0.0.0:{port}/article",
                                 "http://[::ffff:127.0.0.1]:{port}/article", "http://2130706433:{port}/article"])
async def test_loopback_is_refused_without_the_test_override(fake_web: FakeWeb, url: str) -> None:
    f = fetcher(names=Names({"localhost": ["127.0.0.1"]}))
    with pytest.raises(FetchRefused):
        await f.fetch(url.format(port=fake_web.port))
    await f.close()
    assert fake_web.hits == []  # nothing reached the server


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
                                 "http://10.0.0.5/", "http://192.168.1.1/", "http://100.64.0.1/",
                                 "http://224.0.0.1/", "http://[fe80::1]/", "ftp://example.com/",
                                 "http://user:pw@example.com/"])
async def test_forbidden_addresses_and_schemes_are_refused(url: str) -> None:
    f = fetcher(allow_loopback=True)  # even with the loopback override
    with pytest.raises(FetchRefused):
        await f.fetch(url)
    await f.close()


async def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    names = Names({"intranet.example": ["10.1.2.3"], "mixed.example": ["93.184.216.34", "192.168.0.10"]})
    f = fetcher(allow_loopback=True, names=names)
    with pytest.raises(FetchRefused, match="private"):
        await f.fetch("http://intranet.example/")
    with pytest.raises(FetchRefused, match="private"):  # one bad address of several is enough
        await f.fetch("https://mixed.example/")
    await f.close()


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/", "http://intranet.example/admin",
                                    "http://[::ffff:a9fe:a9fe]/", "http://127.0.0.9:{port}/article"])
async def test_a_redirect_to_a_forbidden_address_is_refused(fake_web: FakeWeb, target: str) -> None:
    # The first hop is a public name pinned to the loopback fixture (the test override); the
    # redirect's target is checked again: metadata, a name resolving to a private address, metadata
    # as IPv4-mapped IPv6, and a loopback address listed as one of the deployment's own.
    names = Names({"public.example": [fake_web.host], "intranet.example": ["10.9.8.7"]})
    f = Fetcher(Policy.build(["127.0.0.9/32"], allow_loopback=True), FetchLimits(), resolver=names)
    with pytest.raises(FetchRefused):
        await f.fetch(f"http://public.example:{fake_web.port}/redirect?to={target.format(port=fake_web.port)}")
    await f.close()
    assert [h["path"] for h in fake_web.hits] == ["/redirect"]  # the target was never requested


async def test_the_deployments_own_hosts_are_refused() -> None:
    policy = Policy.build(["203.0.113.7/32", "gateway.internal"], service_urls=[
        "postgresql+psycopg://zcbot:pw@db.example.net:5432/zcbot", "nats://nats.example.net:4222"])
    names = Names({"db.example.net": ["93.184.216.40"], "alias.example.com": ["93.184.216.40"],
                   "gateway.internal": ["93.184.216.41"]})
    f = Fetcher(policy, FetchLimits(), resolver=names)
    for url in ("http://db.example.net/", "http://alias.example.com/", "http://gateway.internal/"):
        with pytest.raises(FetchRefused, match="own"):
            await f.fetch(url)
    await f.close()


async def test_limits_type_size_time_and_redirects(fake_web: FakeWeb) -> None:
    f = fetcher(allow_loopback=True, max_bytes=100_000, timeout=1.0, max_redirects=1)
    with pytest.raises(FetchFailed, match="content type image/png"):
        await f.fetch(f"{fake_web.base_url}/image.png")
    with pytest.raises(FetchFailed, match="limit"):
        await f.fetch(f"{fake_web.base_url}/big")
    with pytest.raises(FetchFailed, match="longer than 1 s"):
        await f.fetch(f"{fake_web.base_url}/slow")
    loop = f"{fake_web.base_url}/redirect?to=/redirect%3Fto%3D/article"
    with pytest.raises(FetchFailed, match="redirects"):
        await f.fetch(loop)
    await f.close()


def test_address_rules() -> None:
    bad = ["127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.0.1", "169.254.169.254", "fd00:ec2::254",
           "100.64.0.1", "100.127.255.254", "0.0.0.0", "::", "224.0.0.251", "ff02::1", "fe80::1", "fc00::1",
           "::ffff:10.0.0.1", "64:ff9b::a00:1", "198.18.0.1", "240.0.0.1", "255.255.255.255"]
    for raw in bad:
        assert address_problem(ipaddress.ip_address(raw)) is not None, raw
    for raw in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1"]:
        assert address_problem(ipaddress.ip_address(raw)) is None, raw
    assert address_problem(ipaddress.ip_address("127.0.0.1"), allow_loopback=True) is None
    assert address_problem(ipaddress.ip_address("169.254.169.254"), allow_loopback=True) is not None


def test_production_refuses_the_test_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS", "true")
    monkeypatch.setenv("ZCBOT_ENV", "production")
    with pytest.raises(ConfigError, match="test-only"):
        HostToolSettings.from_env()
    monkeypatch.setenv("ZCBOT_ENV", "local")
    assert HostToolSettings.from_env().fetch_allow_loopback is True


async def test_https_to_the_pinned_address_verifies_the_certificate_for_the_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The connection goes to the checked IP, yet TLS sends the name (SNI) and checks the certificate
    against it: a certificate for the name passes, the same server under another name does not."""
    import ssl

    from aiohttp import web

    ca, cert, key = make_ca_and_server_cert(tmp_path, dns_names=("secure.example",), ips=())
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    seen_sni: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: seen_sni.append(name)  # type: ignore[assignment]
    app = web.Application()
    app.router.add_get("/article", lambda r: web.Response(text="<html><body><article><p>" + "Secure text. " * 20
                                                          + "</p></article></body></html>", content_type="text/html"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client_ctx = ssl.create_default_context(cafile=str(ca))
    names = Names({"secure.example": ["127.0.0.1"], "other.example": ["127.0.0.1"]})
    f = Fetcher(Policy(allow_loopback=True), FetchLimits(), resolver=names, verify=client_ctx)
    try:
        got = await f.fetch(f"https://secure.example:{port}/article")
        assert "Secure text." in got.page.markdown and seen_sni == ["secure.example"]
        with pytest.raises(FetchFailed):  # same address, a name the certificate does not cover (and no
            await f.fetch(f"https://other.example:{port}/article")  # kept connection carries it past the check)
        assert seen_sni == ["secure.example", "other.example"]
    finally:
        await f.close()
        await runner.cleanup()
