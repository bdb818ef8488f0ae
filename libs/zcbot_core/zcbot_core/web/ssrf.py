"""Where `web_fetch` may connect (SSRF defence): resolve once, check every address, connect to the
checked address only (the request goes to the IP, with the name in `Host` and TLS SNI), so a DNS
answer that changes between the check and the connection (rebinding) cannot move the request.

Refused always: loopback, private (RFC 1918, ULA fc00::/7), link-local (169.254/16, fe80::/10),
CGNAT 100.64/10, cloud metadata (169.254.169.254, fd00:ec2::254), unspecified, multicast, reserved
and every other non-global range, IPv4 embedded in IPv6 (mapped, NAT64) by its IPv4 address, and
the deployment's own addresses (`ZCBOT_WEB_FETCH_DENY`, plus the hosts of the database and NATS
URLs). A name refuses when any of its addresses does. `allow_loopback` exists for tests only
(`HostToolSettings` refuses it in production)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from zcbot_core.errors import ZcbotError

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class FetchRefused(ZcbotError):
    """The URL (or a redirect) points where `web_fetch` must not go; the message says why."""

    code = "web_fetch_refused"
    http_status = 400


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _embedded_v4(ip: IP) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(ip: IP, allow_loopback: bool = False) -> str | None:
    """Why `ip` is not a public address `web_fetch` may reach, or None."""
    inner = _embedded_v4(ip)
    if inner is not None:
        return address_problem(inner, allow_loopback)
    if ip in METADATA:
        return "a cloud metadata address"
    if ip.is_loopback:
        return None if allow_loopback else "a loopback address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_link_local:
        return "a link-local address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in CGNAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "a reserved, non-public address"
    return None


@dataclass
class Policy:
    allow_loopback: bool = False
    deny_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = field(default_factory=list)
    deny_hosts: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, entries: list[str], *, service_urls: list[str | None] = (), allow_loopback: bool = False) -> "Policy":
        """`entries`: CIDRs, IPs or host names; `service_urls`: the deployment's own URLs (DB, NATS)."""
        policy = cls(allow_loopback=allow_loopback)
        hosts = list(entries)
        for url in service_urls:
            host = urlsplit(url.replace("postgresql+psycopg", "postgresql")).hostname if url else None
            if host and not (allow_loopback and _is_loopback_name(host)):
                # (under the test override the whole stack runs on loopback: its services stay reachable
                # like the fixtures; production refuses loopback anyway)
                hosts.append(host)
        for entry in hosts:
            try:
                policy.deny_networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                policy.deny_hosts.add(entry.lower().rstrip("."))
        return policy

    def check_ip(self, ip: IP, shown: str) -> None:
        problem = address_problem(ip, self.allow_loopback)
        if problem is None and any(ip in net for net in self.deny_networks if net.version == ip.version):
            problem = "one of this deployment's own service addresses"
        if problem is not None:
            raise FetchRefused(f"refused: {shown} is {problem}; web_fetch only reaches public web addresses")

    async def pin(self, host: str, port: int, resolver: Resolver) -> str:
        """The one checked address the request will connect to (every address of the name is checked)."""
        name = host.lower().rstrip(".")
        try:
            literal: IP | None = ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            self.check_ip(literal, str(literal))
            return str(literal)
        if not name or name in self.deny_hosts or name == "localhost" or name.endswith(".localhost"):
            if not (self.allow_loopback and name not in self.deny_hosts):
                raise FetchRefused(f"refused: {host} is one of this deployment's own or local hosts")
        denied_names = [await _resolve_quiet(h, port, resolver) for h in self.deny_hosts]
        try:
            addresses = await resolver(name, port)
        except OSError as exc:
            raise FetchRefused(f"could not resolve {host}: {exc.strerror or exc}") from None
        if not addresses:
            raise FetchRefused(f"could not resolve {host}")
        own = {a for found in denied_names for a in found}
        for raw in addresses:
            ip = ipaddress.ip_address(raw.split("%", 1)[0])
            if raw in own:
                raise FetchRefused(f"refused: {host} resolves to one of this deployment's own service addresses")
            self.check_ip(ip, f"{host} ({ip})")
        return addresses[0].split("%", 1)[0]


def _is_loopback_name(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


async def _resolve_quiet(host: str, port: int, resolver: Resolver) -> list[str]:
    try:
        return await resolver(host, port)
    except OSError:
        return []
