"""Credentials for an embedded NATS: one generated password per service and for the topology's setup
step (`zcbot_core.bus.access.IDENTITIES`; and an admin for the
operator's tools and the tests), the server's configuration with only their bcrypt hashes and each
identity's subject permissions (`zcbot_core.bus.access`).

`zcbot up` keeps the passwords in `ZCBOT_HOME/nats-credentials.json` (mode 0600) so a restart
reuses them; the server's configuration is rewritten at every start.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import bcrypt

from zcbot_core.bus.access import IDENTITIES, server_auth_config
from zcbot_core.bus.subjects import Topology
from zcbot_devstack.bootstrap import _write_private  # the one 0600 writer of the dev stack

CREDENTIALS_FILE = "nats-credentials.json"
ADMIN_USER = "admin"
# The passwords are 32 random bytes: a bcrypt cost above the minimum would add server time to every
# connection without making them harder to guess.
BCRYPT_ROUNDS = 4


def _hash(password: str) -> str:
    # nats-server recognises bcrypt hashes by the `$2a$` prefix.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS, prefix=b"2a")).decode()


@dataclass(frozen=True)
class NatsCredentials:
    """The password of every service identity and of the admin."""

    passwords: dict[str, str]

    @classmethod
    def generate(cls) -> NatsCredentials:
        return cls({name: secrets.token_urlsafe(32) for name in (*IDENTITIES, ADMIN_USER)})

    @classmethod
    def ensure(cls, home: Path) -> NatsCredentials:
        """The credentials kept under `home`, created (0600) on the first start."""
        path = home / CREDENTIALS_FILE
        try:
            stored = json.loads(path.read_text())
            if isinstance(stored, dict) and all(isinstance(stored.get(n), str) for n in (*IDENTITIES, ADMIN_USER)):
                return cls(stored)
        except (OSError, ValueError):
            pass
        creds = cls.generate()
        home.mkdir(parents=True, exist_ok=True)
        _write_private(path, json.dumps(creds.passwords, indent=2) + "\n")
        return creds

    def write_server_config(self, path: Path, topo: Topology | None,
                            tls: tuple[Path, Path] | None = None) -> Path:
        """The server's configuration; without `topo` (a server shared by stacks of many prefixes,
        as the tests' session server) only the admin may connect. `tls` (certificate, key): clients
        must connect with TLS (`tls://` URLs and `ZCBOT_NATS_CA`)."""
        hashes = {name: _hash(self.passwords[name]) for name in IDENTITIES} if topo is not None else {}
        topo = topo or Topology()
        config = json.loads(server_auth_config(topo, hashes, admin=(ADMIN_USER, _hash(self.passwords[ADMIN_USER]))))
        if tls is not None:
            config["tls"] = {"cert_file": str(tls[0]), "key_file": str(tls[1])}
        _write_private(path, json.dumps(config, indent=2))
        return path

    def service_env(self, service: str) -> dict[str, str]:
        """A service's own identity (its environment under `zcbot up` and in the tests); `setup` is the
        identity of `zcbot bus setup`."""
        return {"ZCBOT_NATS_USER": service, "ZCBOT_NATS_PASSWORD": self.passwords[service]}

    def admin_url(self, url: str) -> str:
        """`url` with the admin's credentials in it (for tools that take a bare URL); a comma-separated
        server list gets them in every entry."""
        creds = f"{ADMIN_USER}:{quote(self.passwords[ADMIN_USER], safe='')}@"
        return ",".join(f"{scheme}://{creds}{rest}" for scheme, rest in
                        (entry.strip().split("://", 1) for entry in url.split(",") if entry.strip()))
