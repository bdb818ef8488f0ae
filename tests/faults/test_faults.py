"""Jepsen-style fault scenarios on the 3-node cluster (issue 42), each under the load of `load.py` and
judged by `checker.py` over the whole history. `ZCBOT_FAULT_SEED` replaces every scenario's seed (to
reproduce or explore); the nemesis' and the checker's lines (shown with -s) name what happened when.

- a paused stream leader (SIGSTOP past the election timeout, then SIGCONT: a stale leader comes back);
- the node holding a runner's NATS connection partitioned from the other two, then healed;
- the node holding a gateway's NATS connection partitioned, then healed;
- a bridge: the node holding a runner's connection sees both others, which do not see each other;
- PostgreSQL stopped mid-run for longer than the runs' redeliveries (ack_wait 3 s x 5), then restarted;
- a mixed nemesis (pause, partition, kill) drawn from a seed, also the soak entry (`SOAK_SECONDS`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable

import pytest

from tests.faults.checker import Verdict, check
from tests.faults.conftest import FaultEnv
from tests.faults.load import Load
from tests.faults.nemesis import Fault, Nemesis, schedule
from zcbot_core.agent.lang import say

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

LOAD_SECONDS = 22.0
# The mixed nemesis as a soak: `ZCBOT_FAULT_SECONDS=600 ZCBOT_FAULT_SEED=7 pytest -m heavy -s
# tests/faults -k mixed` runs it for ten minutes and prints the checker's verdict.
SOAK_SECONDS = float(os.environ.get("ZCBOT_FAULT_SECONDS", LOAD_SECONDS))


def seed_of(default: int) -> int:
    return int(os.environ.get("ZCBOT_FAULT_SEED", default))


async def run_scenario(env: FaultEnv, nemesis: Nemesis, seed: int, faults: Awaitable[None],
                       seconds: float = LOAD_SECONDS, keep: list[Load] | None = None) -> Verdict:
    """The load under `faults`, judged by the checker; `keep` receives the load (its recorded history)."""
    load = Load(env.stack, seed)
    if keep is not None:
        keep.append(load)
    await load.login()
    load.t0 = nemesis.t0 = time.monotonic()
    started = time.monotonic()
    await asyncio.gather(load.run(seconds), faults)
    verdict = await check(load, env.db_url)
    dead = [f"{p.name} exited {p.returncode}" for p in env.stack.procs if not p.alive]
    for what in dead:
        verdict.fail("service", what)
    print(f"seed {seed}: {time.monotonic() - started:.1f} s; nemesis {nemesis.history}\n{verdict.summary()}")
    return verdict


def service_pid(env: FaultEnv, name: str) -> int:
    return next(p.pid for p in env.stack.procs if p.name == name and p.alive)


async def test_a_paused_leader_loses_nothing(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    seed = seed_of(4201)
    faults = schedule(seed, ("pause",), ("runs-leader", "events-leader"), count=2, window=LOAD_SECONDS,
                      duration=(6.0, 9.0))
    verdict = await run_scenario(fault_env, nemesis, seed, nemesis.run(faults))
    assert verdict.ok, f"seed {seed}: {verdict.summary()}\n{fault_env.stack.logs(1500)}"


@pytest.mark.parametrize("side", ["runner", "gateway"])
async def test_a_partitioned_minority_with_a_service_on_it_heals(fault_env: FaultEnv, nemesis: Nemesis,
                                                                 side: str) -> None:
    seed = seed_of(4202 if side == "runner" else 4203)
    fault = Fault("partition", f"node-of:{service_pid(fault_env, side)}", at=3.0, duration=12.0)
    verdict = await run_scenario(fault_env, nemesis, seed, nemesis.run([fault]))
    assert any(h["op"] == "cut seen by the majority" for h in nemesis.history), nemesis.history
    assert verdict.ok, f"seed {seed}: {verdict.summary()}\n{fault_env.stack.logs(1500)}"


async def test_a_bridge_partition_heals(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    """The node the runner uses sees both others, which do not see each other, for 12 s."""
    seed = seed_of(4208)
    fault = Fault("bridge", f"node-of:{service_pid(fault_env, 'runner')}", at=3.0, duration=12.0)
    verdict = await run_scenario(fault_env, nemesis, seed, nemesis.run([fault]))
    dropped = next(h["packets"] for h in nemesis.history if h["op"] == "bridge dropped")
    assert len(dropped) == 3 and dropped[0] > 0, f"the bridge did not cut the others' replies: {dropped}"
    assert verdict.ok, f"seed {seed}: {verdict.summary()}\n{fault_env.stack.logs(1500)}"


async def test_postgres_stopped_longer_than_the_redeliveries(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    seed = seed_of(4204)

    async def outage() -> None:
        await asyncio.sleep(4.0)
        nemesis.record("postgres stop")
        try:
            await asyncio.to_thread(fault_env.pg.stop)
            await asyncio.sleep(18.0)  # > ack_wait 3 s x max_deliver 5: the run requests run out of deliveries
        finally:
            await asyncio.to_thread(fault_env.pg.start)
            nemesis.record("postgres started")

    loads: list[Load] = []
    verdict = await run_scenario(fault_env, nemesis, seed, outage(), keep=loads)
    assert verdict.ok, f"seed {seed}: {verdict.summary()}\n{fault_env.stack.logs(1500)}"
    # The runs the outage ended are told so: the database was unavailable (the clients write English).
    told = {e["data"]["msg"] for rec in loads[0].runs if rec.follower is not None
            for e in rec.follower.events if e["event"] == "error" and e["data"].get("code") == "lost"}
    print(f"lost runs were told: {told}")
    assert told <= {say("db_outage_lost_error", "en")}, told


async def test_a_mixed_nemesis_from_a_seed(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    """Pauses, partitions and kills of the stream leaders and of the nodes the services use, drawn
    from the seed (the soak entry: ZCBOT_FAULT_SECONDS, ZCBOT_FAULT_SEED)."""
    seed = seed_of(4205)
    targets = ("runs-leader", "events-leader", f"node-of:{service_pid(fault_env, 'runner')}",
               f"node-of:{service_pid(fault_env, 'gateway')}")
    faults = schedule(seed, ("pause", "partition", "kill"), targets, count=10_000, window=SOAK_SECONDS,
                      duration=(3.0, 8.0))
    print(f"seed {seed}: schedule {faults}")
    verdict = await run_scenario(fault_env, nemesis, seed, nemesis.run(faults), seconds=SOAK_SECONDS)
    assert verdict.ok, f"seed {seed}: {verdict.summary()}\n{fault_env.stack.logs(1500)}"
