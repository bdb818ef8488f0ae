"""`ZCBOT_NATS_URL` as a server list: one URL or a cluster's servers, comma-separated.

nats-py takes a list of servers and fails on a comma-separated string (`invalid connect url
option`); every connection goes through `server_list`, and settings validation uses it too, so a
bad entry stops a service at start-up naming the entry (its credentials, if any, masked).
"""

from __future__ import annotations

from urllib.parse import urlsplit

SCHEMES = frozenset({"nats", "tls", "ws", "wss"})


def _masked(entry: str) -> str:
    parts = urlsplit(entry)
    if parts.password:
        return entry.replace(parts.password, "***")
    return entry


def server_list(value: str) -> list[str]:
    """The servers of `value` in order; ValueError on an empty list or an entry that is not a URL."""
    servers = [part.strip() for part in value.split(",") if part.strip()]
    if not servers:
        raise ValueError("no NATS server given")
    for entry in servers:
        parts = urlsplit(entry)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in SCHEMES or not parts.hostname or port == -1:
            raise ValueError(f"{_masked(entry)!r} is not a NATS server URL such as nats://host:4222")
    return servers
