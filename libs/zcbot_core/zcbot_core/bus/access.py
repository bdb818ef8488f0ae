"""Who may publish and subscribe to what on the bus: one NATS user per service (docs/security.md, NATS).

Mechanism: user/password with permissions in the server configuration (docs/decisions.md). The
server holds only bcrypt hashes; each service gets its password through `ZCBOT_NATS_PASSWORD`
(a Secret in deploy/). Every identity has its own inbox prefix (`_INBOX_<service>`) so that a
subscription on `_INBOX.>` (which any requester needs) cannot read another service's replies -
tool results above all.

Subjects are built from a known bus prefix. The topology (streams, KV buckets and their settings,
durable consumers) is declared by the `setup` identity alone (`zcbot bus setup`, run by `zcbot up`
and by the bus-setup job in deploy/); the runtime identities may read it, use it and make ephemeral
consumers, but not create, change or delete a stream, a bucket or a durable consumer (issue 36: the
runner had set the ended-runs bucket's max age to 5 s, which erased every mark).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from zcbot_core.bus.subjects import Topology

SERVICES = ("gateway", "runner", "executor", "scheduler", "channels")
SETUP = "setup"  # declares the topology; no service runs with it
IDENTITIES = (*SERVICES, SETUP)


def inbox_prefix(service: str) -> str:
    """The inbox prefix a service connects with (its replies arrive below it)."""
    return f"_INBOX_{service}"


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    # Serving requests (executor calls, probes, pushes): may answer on the requester's reply subject.
    responds: bool = False
    # Carved out of `publish` (a deny wins over an allow): the durable consumers' management.
    deny_publish: tuple[str, ...] = ()

    def as_config(self) -> dict[str, object]:
        publish: dict[str, object] = {"allow": list(self.publish)}
        if self.deny_publish:
            publish["deny"] = list(self.deny_publish)
        out: dict[str, object] = {
            "publish": publish,
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.responds:
            out["allow_responses"] = True
        return out


def _streams(topo: Topology) -> list[str]:
    return [topo.runs_stream, topo.events_stream, topo.channel_inbound_stream, topo.file_changes_stream,
            *(f"KV_{b}" for b in topo.kv_buckets)]


def _jetstream(topo: Topology) -> list[str]:
    """The JetStream API a runtime identity uses on this prefix's streams: stream info, message reads,
    deletes of a handled message, consumers (ephemeral ones made, durable ones bound; see
    `_durables_denied`), acks. No STREAM.CREATE / UPDATE / DELETE / PURGE: the topology is the setup
    identity's."""
    out = ["$JS.API.INFO"]
    for s in _streams(topo):
        # No identity may delete a message of the ended-runs bucket: that would make an ended run's
        # grant good again (a KV delete or purge leaves a marker, which still counts as ended).
        delete = [] if s == f"KV_{topo.ended_runs_bucket}" else [f"$JS.API.STREAM.MSG.DELETE.{s}"]
        out += [f"$JS.API.STREAM.INFO.{s}",
                f"$JS.API.STREAM.MSG.GET.{s}", *delete,
                f"$JS.API.DIRECT.GET.{s}", f"$JS.API.DIRECT.GET.{s}.>",
                f"$JS.API.CONSUMER.*.{s}", f"$JS.API.CONSUMER.*.{s}.>", f"$JS.API.CONSUMER.*.*.{s}.>",
                f"$JS.ACK.{s}.>"]
    return out


def _durables_denied(topo: Topology) -> list[str]:
    """A runtime identity binds to the durable consumers; creating, changing or deleting one (its
    ack wait, max deliveries, filter) is the setup identity's."""
    out = []
    for stream, durable in ((topo.runs_stream, topo.runners_consumer),
                            (topo.channel_inbound_stream, topo.channels_consumer),
                            (topo.file_changes_stream, topo.file_changes_consumer)):
        out += [f"$JS.API.CONSUMER.CREATE.{stream}.{durable}", f"$JS.API.CONSUMER.CREATE.{stream}.{durable}.>",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}", f"$JS.API.CONSUMER.DELETE.{stream}.{durable}"]
    return out


def _setup_api(topo: Topology) -> list[str]:
    """The setup identity: declare and repair this prefix's streams, buckets and durable consumers."""
    out = ["$JS.API.INFO"]
    for s in _streams(topo):
        out += [f"$JS.API.STREAM.INFO.{s}", f"$JS.API.STREAM.CREATE.{s}", f"$JS.API.STREAM.UPDATE.{s}",
                f"$JS.API.CONSUMER.*.{s}", f"$JS.API.CONSUMER.*.{s}.>", f"$JS.API.CONSUMER.*.*.{s}.>"]
    return out


def _kv(bucket: str) -> str:
    return f"$KV.{bucket}.>"


def service_permissions(service: str, topo: Topology) -> Permissions:
    """What `service` (one of IDENTITIES) may publish and subscribe to."""
    permissions = _permissions(service, topo)
    if service == SETUP:
        return permissions
    return Permissions(permissions.publish, permissions.subscribe, permissions.responds,
                       deny_publish=tuple(_durables_denied(topo)))


def _permissions(service: str, topo: Topology) -> Permissions:
    p = topo.prefix
    own_inbox = f"{inbox_prefix(service)}.>"
    js = _jetstream(topo)
    if service == SETUP:  # nothing but the JetStream API of this prefix's topology
        return Permissions(publish=tuple(_setup_api(topo)), subscribe=(own_inbox,))
    leases = _kv(topo.leases_bucket)
    # runstate.submit / transitions.cancel; and the ended-runs marks of the transitions that end runs
    # (end, reap, a waiting run's cancel). The executor only reads them.
    submit = [f"{p}.runs.*", f"{p}.cancel.*", _kv(topo.cancel_bucket), _kv(topo.ended_runs_bucket)]
    # The `done` of a run ended outside a runner: a waiting run's cancel or replacement (gateway,
    # scheduler), a queued run given up by the requeue sweep (scheduler); the runners publish the rest.
    ends_runs = f"{p}.ev.*"
    if service == "gateway":
        return Permissions(publish=(*js, *submit, ends_runs, f"{p}.chin.*", f"{p}.push.*", f"{p}.exec.bgstop",
                                    f"{p}.exec.procs"),  # the web's process cards (ProcsRequest)
                           subscribe=(own_inbox,))  # events arrive through a JetStream consumer's inbox
    if service == "runner":  # responds: the executors' egress usage reports (recorded, answered with totals)
        return Permissions(
            publish=(*js, *submit, f"{p}.ev.*", f"{p}.exec.*.call", f"{p}.exec.*.cancel", leases),
            subscribe=(own_inbox, f"{p}.cancel.*", topo.egress_usage_subject(),
                       f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{topo.runs_stream}.{topo.runners_consumer}"),
            responds=True)
    if service == "executor":
        return Permissions(
            # fchg: a background process's file changes (runner records them; no other identity may)
            # egress.usage: its users' egress bytes, for the cap counted in PostgreSQL (a runner answers)
            # exec.*.cancel: the probe of the host a user's lease names, before taking over the lease of a
            # dead one (executor/leases.py; refused, a lost host's users kept its lease and their calls on
            # the new host were reported stopped: issue 42, an executor host lost)
            publish=(*js, _kv(topo.sandbox_leases_bucket), "$SRV.>", topo.file_changes_subject(),
                     topo.egress_usage_subject(), f"{p}.exec.*.cancel"),
            subscribe=(own_inbox, f"{p}.exec.*.call", f"{p}.exec.*.cancel", f"{p}.exec.bgstop", f"{p}.exec.procs",
                       "$SRV.>"),
            responds=True)
    if service == "scheduler":  # cancels timed-out runs, and with them their background processes
        return Permissions(publish=(*js, *submit, ends_runs, f"{p}.push.*", f"{p}.exec.bgstop", leases),
                           subscribe=(own_inbox, f"{p}.ev.*"))
    if service == "channels":
        return Permissions(publish=(*js, *submit, f"{p}.push.*", leases),
                           subscribe=(own_inbox, f"{p}.push.*", f"{p}.ev.*"), responds=True)
    raise ValueError(f"unknown service: {service!r}")


def server_auth_config(topo: Topology, password_hashes: dict[str, str],
                       admin: tuple[str, str] | None = None) -> str:
    """The `authorization` block of nats-server's configuration (JSON is valid NATS config syntax).

    `password_hashes` maps a service to the bcrypt hash of its password; `admin` (user, hash) is an
    unrestricted identity for the operator's tools and the tests. No user means no anonymous access:
    a server with an `authorization.users` list refuses connections without credentials.
    """
    users: list[dict[str, object]] = []
    for service, hashed in sorted(password_hashes.items()):
        users.append({"user": service, "password": hashed,
                      "permissions": service_permissions(service, topo).as_config()})
    if admin is not None:
        users.append({"user": admin[0], "password": admin[1]})
    return json.dumps({"authorization": {"users": users}}, indent=2)


# ---- the deploy/ configuration ----------------------------------------------------------------
DEPLOY_CONFIG = "deploy/k8s/base/nats-auth.conf"  # also mounted by docker-compose.yml


def password_env(service: str) -> str:
    """The nats server's variable holding `service`'s password (deploy/: from a Secret or .env)."""
    return f"NATS_PASSWORD_{service.upper()}"


def deploy_config(topo: Topology | None = None) -> str:
    """nats-server's configuration for deploy/: the permissions of `bus_prefix` (default `zcbot`),
    each password a reference to the server's environment (NATS config variables), no admin."""
    text = server_auth_config(topo or Topology(), {s: f"@@{password_env(s)}@@" for s in IDENTITIES})
    for service in IDENTITIES:  # a variable is written bare: quoted, it would be a literal string
        text = text.replace(f'"@@{password_env(service)}@@"', f"${password_env(service)}")
    header = ("# Generated by `python -m zcbot_core.bus.access` from zcbot_core/bus/access.py; do not edit.\n"
              "# The permissions are for ZCBOT_BUS_PREFIX=zcbot; another prefix needs this file regenerated\n"
              "# (`python -m zcbot_core.bus.access --prefix NAME --out FILE`). Passwords come from the server's\n"
              "# environment: " + ", ".join(password_env(s) for s in IDENTITIES) + ".\n")
    return header + text + "\n"


def main(argv: list[str] | None = None) -> None:
    import argparse
    from pathlib import Path

    from zcbot_core.platform.config import REPO_ROOT

    parser = argparse.ArgumentParser(description="write nats-server's authorization config for deploy/")
    parser.add_argument("--prefix", default="zcbot")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / DEPLOY_CONFIG)
    args = parser.parse_args(argv)
    args.out.write_text(deploy_config(Topology(args.prefix)), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
