"""zcbot benchmark: `python -m bench.run [--quick]` prints one JSON document (issue 11).

Starts the real stack (embedded NATS/PostgreSQL unless ZCBOT_NATS_URL/ZCBOT_DB_URL are set) with
production durability (a 3-node JetStream cluster, replicas 3, sync_interval always; PostgreSQL with
fsync; `--fast` turns both off, labelled in the report) and the fake LLM answering instantly, and measures pipeline overhead (against the same loop driven
in-process), cancel latency, tool round trips, throughput, SSE fan-out and crash recovery.
The figures live in `bench.latency` and `bench.load`; `bench.harness` starts the stack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.cluster import fan_in, leader_kills
from bench.harness import BenchStack, Client, machine_info
from bench.latency import cancel_latency, llm_client_overhead, pipeline, tool_round_trip
from bench.load import arrivals, fanout, open_runs, recovery, throughput


async def main_async(quick: bool, only: list[str] | None = None, fast: bool = False) -> dict[str, Any]:
    stack = BenchStack.create(fast=fast)
    report: dict[str, Any] = {"machine": machine_info(), "started_at": time.time(), "durability": stack.durability()}
    try:
        stack.start_infra()
        stack.service("executor")
        stack.service("gateway")
        stack.service("runner")
        client = Client(stack.base_url, stack.env["PLATFORM_KEY"])
        iters = 20 if quick else 100
        wanted = set(only or ["pipeline", "arrivals", "llm", "cancel", "tools", "throughput", "fanout", "fanin",
                              "leaders", "recovery", "open_runs"])
        if "pipeline" in wanted:
            report["pipeline"] = await pipeline(stack, client, iters)
        if "arrivals" in wanted:
            report["poisson_arrivals"] = await arrivals(stack, client, 40 if quick else 200)
        if "llm" in wanted:
            report["llm_client"] = await llm_client_overhead(stack, 20 if quick else 100)
        if "cancel" in wanted:
            report["cancel"] = await cancel_latency(stack, client, 5 if quick else 20)
        if "tools" in wanted:
            report["tool_round_trip"] = await tool_round_trip(stack, 30 if quick else 200)
        if "throughput" in wanted:
            report["throughput_one_runner"] = await throughput(stack, client, [50] if quick else [50, 200], "a")
            stack.service("runner")
            report["throughput_two_runners"] = await throughput(stack, client, [50] if quick else [50, 200], "b")
        if "fanout" in wanted:
            report["sse_fanout"] = await fanout(stack, client, [200] if quick else [200, 1000])
        if "fanin" in wanted:
            report["gateway_fan_in"] = await fan_in(stack, client, 5000 if quick else 30000)
        if "leaders" in wanted:
            report["leader_kills"] = await leader_kills(stack, client, 5 if quick else 10, 40 if quick else 100)
        if "recovery" in wanted:
            report["recovery"] = await recovery(stack, client, 2 if quick else 5)
        if "open_runs" in wanted:
            report["open_runs_one_process"] = await open_runs(stack, client, 200 if quick else 1000,
                                                              5.0 if quick else 10.0)
        await client.close()
    finally:
        stack.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--only", nargs="*", choices=("pipeline", "arrivals", "llm", "cancel", "tools", "throughput", "fanout",
                                                  "fanin", "leaders", "recovery", "open_runs"),
                        help="run only these figures")
    parser.add_argument("--fast", action="store_true",
                        help="NOT production: one NATS server without the sync policy, replicas 1, PostgreSQL "
                             "without fsync (the figures before issue 23); labelled in the report")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    report = asyncio.run(main_async(args.quick, args.only, args.fast))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
