"""Sandbox egress for package installs: a host-side proxy (proxy.py) reached only through a unix
socket per user that the backend binds into the sandbox (`hub.py`), an allowlist (`allowlist.py`)
applied by a proxy.py plugin (`plugin.py`), per-user byte metering and a JSON-lines audit log.
Inside the sandbox `egress_forward.py` (a runner file) listens on 127.0.0.1:SANDBOX_PORT.
See docs/security.md, "Egress"."""

from __future__ import annotations

SANDBOX_SOCKET = "/run/zcbot/egress.sock"
"""Where the user's socket appears inside a sandbox (bwrap and docker)."""
SANDBOX_PORT = 3128
"""The forwarder's port on the sandbox's own loopback (HTTP_PROXY=http://127.0.0.1:3128)."""
SANDBOX_VENV = "/workspace/.venv"
"""The user's venv as sandboxes see it (`<user_root>/.venv` on the host)."""


def proxy_env(pip_index_url: str | None = None) -> dict[str, str]:
    """What pip and npm in a sandbox read to use the bridge. The sandbox's own loopback stays
    direct (NO_PROXY): a server the user runs inside the sandbox is reached without the proxy."""
    url = f"http://127.0.0.1:{SANDBOX_PORT}"
    env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
           "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
           "npm_config_proxy": url, "npm_config_https_proxy": url}
    if pip_index_url:
        env["PIP_INDEX_URL"] = pip_index_url
    return env
