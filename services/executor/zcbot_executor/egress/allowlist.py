"""Where a sandbox's package install may connect: the egress domain allowlist.

Entries (ZCBOT_EGRESS_ALLOW, comma-separated):
- `pypi.org`          that name, ports 443 and 80;
- `*.example.org`     every subdomain of example.org (not example.org itself), ports 443 and 80;
- `host:8443`         that name (or pattern) on that port only;
- `10.0.0.5:3141`, `[::1]:8080`, `127.0.0.1:9000`  an IP literal: exactly that address, as the
  operator wrote it (a private package mirror, or a test's index on loopback).

A *name* is resolved by the proxy, every address is checked and the connection goes to the checked
address only (no DNS rebinding between check and connect); a name that resolves to anything but a
public address (loopback, private, link-local/metadata, CGNAT, reserved) is refused even when
allowlisted — only an IP-literal entry reaches a non-public address. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_PORTS = (443, 80)
Resolver = Callable[[str, int], list[str]]
NAME = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]*[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$")


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _public(raw: str) -> bool:
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # is_global is False for loopback, RFC 1918, ULA, link-local (169.254/16: metadata), CGNAT
    # 100.64/10, unspecified and the reserved ranges; multicast is refused separately.
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class Entry:
    pattern: str  # a lower-case name, `*.domain`, or an IP literal's compressed text
    ports: tuple[int, ...]
    literal: bool

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.literal:
            ip = _literal(host)
            return ip is not None and ip.compressed == self.pattern
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:])
        return host == self.pattern


def parse_entry(text: str) -> Entry:
    """One allowlist entry; ValueError with the reason for a bad one (a start-up ConfigError)."""
    raw = text.strip().lower().rstrip(".")
    host, port_text = raw, ""
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
    ports = DEFAULT_PORTS
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"bad port in egress allowlist entry {text!r}")
        ports = (int(port_text),)
    ip = _literal(host)
    if ip is not None:
        return Entry(ip.compressed, ports, True)
    if not NAME.match(host):
        raise ValueError(f"bad egress allowlist entry {text!r} (a name, *.domain or an IP, optionally :port)")
    return Entry(host, ports, False)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    address: str | None = None  # the checked address to connect to
    reason: str = ""


class Allowlist:
    def __init__(self, entries: list[str] | tuple[str, ...], resolver: Resolver = system_resolver) -> None:
        self.entries = [parse_entry(e) for e in entries if e.strip()]
        self.resolver = resolver

    def decide(self, host: str, port: int) -> Decision:
        """May a sandbox connect to host:port, and to which address? Blocking (DNS): proxy threads call it."""
        name = host.strip().lower().rstrip(".")
        if not name or not 0 < port < 65536:
            return Decision(False, reason="no target host in the request")
        if not any(e.matches(name, port) for e in self.entries):
            return Decision(False, reason=f"{name}:{port} is not on the egress allowlist")
        ip = _literal(name)
        if ip is not None:  # an IP-literal entry matched: exactly what the operator allowed
            return Decision(True, address=ip.compressed)
        try:
            addresses = self.resolver(name, port)
        except OSError as exc:
            return Decision(False, reason=f"could not resolve {name}: {exc.strerror or exc}")
        if not addresses:
            return Decision(False, reason=f"could not resolve {name}")
        for raw in addresses:
            if not _public(raw):
                return Decision(False, reason=f"{name} resolves to a non-public address ({raw})")
        return Decision(True, address=addresses[0])
