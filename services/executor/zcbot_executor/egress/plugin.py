"""The proxy.py plugin that applies zcbot's egress policy to every sandbox connection.

proxy.py (a maintained HTTP/HTTPS proxy: request parsing, CONNECT tunnels, upstream connections)
does the proxying; this plugin only decides. It runs in proxy.py's connection thread; the
connection's owner (`Conn`: which user's socket it came in on) is found by the socket object the
hub handed to proxy.py, never by anything the sandbox sends.
"""

from __future__ import annotations

from typing import Any

from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

from zcbot_executor import metrics

REFUSED_TEXT = ("zcbot egress proxy: refused: {reason}.\n"
                "Sandboxes reach only the package registries on the allowlist (ZCBOT_EGRESS_ALLOW); "
                "for web pages use the web_fetch / web_search tools.\n")


def _text(value: bytes | None) -> str:
    return value.decode("latin-1") if value else ""


class EgressPlugin(HttpProxyBasePlugin):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hub = self.flags.zcbot_egress
        self.conn = self.hub.conn_of(self.client.connection)
        self.pinned: str | None = None

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        host, port = _text(request.host), int(request.port or 0)
        method = _text(request.method)
        if self.conn is None:  # not a connection the hub accepted: nobody to meter it to
            raise self._refuse(host, port, method, "unknown connection")
        if self.hub.cap.over(self.conn.user_id):  # the user's bytes of the last 24 h on this host
            metrics.EGRESS_CAPPED.labels("refused").inc()
            raise self._refuse(host, port, method, f"user egress cap ({self.hub.cap.limit_mb} MB per 24 h) reached",
                               body=self.hub.cap.refusal_text())
        if self.conn.target is not None and (host, port) != self.conn.target[:2]:
            # one target per connection: the audit line and the pinned address stay true
            raise self._refuse(host, port, method, "one target host per connection")
        decision = self.hub.allowlist.decide(host, port)
        if not decision.allowed:
            raise self._refuse(host, port, method, decision.reason)
        self.pinned = decision.address
        self.conn.set_target(host, port, method, True, "")
        return request

    def _refuse(self, host: str, port: int, method: str, reason: str, body: str | None = None) -> HttpRequestRejected:
        if self.conn is not None:
            self.conn.set_target(host, port, method, False, reason)
        text = REFUSED_TEXT.format(reason=reason) if body is None else body
        return HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                   headers={b"Content-Type": b"text/plain; charset=utf-8"}, body=text.encode("utf-8"))

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, Any]:
        """Connect to the address the allowlist checked, not to a second DNS answer."""
        return self.pinned, None

    def on_access_log(self, context: dict[str, Any]) -> dict[str, Any] | None:
        return None  # the hub writes the audit line (with the user and exact byte counts)
