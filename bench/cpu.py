"""`python -m bench.cpu [--runs 200] [--concurrency 50] [--rounds 3] [--tools] [--separate] [--pyspy OUT]`:
CPU per run of the real `zcbot up` (issue 43), one JSON document.

Starts `zcbot up` as a newcomer would (fresh ZCBOT_HOME, embedded NATS and PostgreSQL with
production durability: fsync and synchronous_commit on; hosted by default, `--separate` for one
process per service) with the fake model answering at once, then per round posts `--runs` messages
(each asking for its run's event stream, `--concurrency` users with one task each, every user's runs
one after another) and reads each stream to `done`. Per round: runs/s, and CPU seconds of each part
of the process tree over the round divided by the runs (`/proc/<pid>/stat` utime + stime, through
psutil): `zcbot` (the `zcbot up` process and its service processes: what issue 43 compares with the
peer's server), `postgres`, `nats`. Steadier than the wall clock on a shared machine, yet other
processes' load still inflates it (cache, context switches: 45 ms here at load 15 against 35-39 on a
quieter machine, for the same code): compare alternated pairs taken in the same minutes.
`--tools`: each run makes one tool call (`write` a small file) before its answer. `--pyspy OUT`
(needs `pip install py-spy`): py-spy samples the `zcbot up` process during the last round (raw
collapsed stacks to OUT; `python -m bench.cpu_profile OUT` sums them by component).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.harness import Client
from bench.startup import FAKE_KEY_ENV, PROFILE, _backends, wait_line
from zcbot_devstack.embedded import free_port
from zcbot_devstack.services import SERVICE_PORT_ENV
from zcbot_fakellm import push_script

ONE_TOOL = [{"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "bench"}}]},
            {"text": "done"}]


def pg_counts(db_url: str) -> tuple[int, int]:
    """Sessions started and transactions ended (committed or rolled back) so far on the database
    (pg_stat_database, PostgreSQL 14+); each single statement in autocommit mode is a transaction."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        row = conn.execute("select sessions, xact_commit + xact_rollback from pg_stat_database"
                           " where datname = current_database()").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds so far of `root`'s process tree, by part: zcbot (python), postgres, nats, other."""
    out = {"zcbot": 0.0, "postgres": 0.0, "nats": 0.0, "other": 0.0, "zcbot_system": 0.0}
    top = psutil.Process(root)
    for p in (top, *top.children(recursive=True)):
        try:
            times, name = p.cpu_times(), p.name()
        except psutil.NoSuchProcess:
            continue
        part = ("postgres" if name.startswith("postgres") else "nats" if "nats" in name
                else "zcbot" if p.pid == root or name.startswith(("python", "zcbot")) else "other")
        # Children reaped by a process count in its children_* times (a sandbox's short-lived helpers).
        out[part] += times.user + times.system + times.children_user + times.children_system
        if part == "zcbot":  # of which in the kernel (system calls: sockets, fsync)
            out["zcbot_system"] += times.system + times.children_system
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each thread of `pid` (/proc/<pid>/task)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


async def _round(client: Client, users: list[tuple[dict[str, str], str]], runs: int, text: str) -> float:
    per_user = [runs // len(users) + (1 if i < runs % len(users) else 0) for i in range(len(users))]
    bad: list[str] = []

    async def user_loop(i: int) -> None:
        headers, task = users[i]
        for k in range(per_user[i]):
            events = await client.post_events(headers, task, f"{text} {k}")
            status = events[-1][1]["data"].get("status")
            if status != "ok":
                bad.append(str(status))

    t0 = time.perf_counter()
    await asyncio.gather(*(user_loop(i) for i in range(len(users))))
    elapsed = time.perf_counter() - t0
    if bad:
        raise RuntimeError(f"{len(bad)} runs did not end ok: {bad[:5]}")
    return elapsed


async def measure(base: str, platform_key: str, fake_url: str, up_pid: int, db_url: str,
                  args: argparse.Namespace) -> dict[str, Any]:
    client = Client(base, platform_key)
    try:
        await push_script(fake_url, "BENCH-1T", ONE_TOOL)
        text = "BENCH-1T go" if args.tools else "hello"
        users = []
        for i in range(args.concurrency):
            headers = await client.login(f"cpu-{i}")
            users.append((headers, await client.task(headers, "cpu")))
        await _round(client, users, max(args.concurrency, args.runs // 4), text)  # warm: pools, caches
        rounds = []
        for r in range(args.rounds):
            spy = None
            if args.pyspy and r == args.rounds - 1:
                spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(up_pid),
                                        "--format", "raw", "--rate", "250", "--gil", "--output", args.pyspy],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                await asyncio.sleep(1.0)  # attached before the round starts
            counts, before, threads = pg_counts(db_url), tree_cpu(up_pid), thread_cpu(up_pid)
            elapsed = await _round(client, users, args.runs, text)
            after, threads_after = tree_cpu(up_pid), thread_cpu(up_pid)
            by_thread = sorted((round(1000 * (v - threads.get(k, 0.0)) / args.runs, 2) for k, v in threads_after.items()),
                               reverse=True)
            await asyncio.sleep(0.6)  # PostgreSQL reports its backends' counts at most every 0.5 s
            sessions, xacts = (b - a for a, b in zip(counts, pg_counts(db_url), strict=True))
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            per_run = {k: round(1000 * (after[k] - before[k]) / args.runs, 2) for k in after}
            per_run["total"] = round(sum(v for k, v in per_run.items() if k != "zcbot_system"), 2)
            rounds.append({"runs": args.runs, "seconds": round(elapsed, 3),
                           "runs_per_second": round(args.runs / elapsed, 2), "cpu_ms_per_run": per_run,
                           "pg_connections_opened_per_run": round((sessions - 1) / args.runs, 3),  # less its own
                           "pg_transactions_per_run": round(xacts / args.runs, 2),
                           # the `zcbot up` process's threads, busiest first (hosted: the services' loop first)
                           "zcbot_cpu_ms_per_run_by_thread": [t for t in by_thread if t > 0.05]})
        median = lambda key: round(statistics.median(x["cpu_ms_per_run"][key] for x in rounds), 2)  # noqa: E731
        return {"rounds": rounds, "median_zcbot_cpu_ms_per_run": median("zcbot"),
                "median_total_cpu_ms_per_run": median("total"),
                "median_runs_per_second": round(statistics.median(x["runs_per_second"] for x in rounds), 2)}
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs per round")
    parser.add_argument("--concurrency", type=int, default=50, help="users posting at once (one task each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", action="store_true", help="one tool call (write) per run")
    parser.add_argument("--separate", action="store_true", help="zcbot up --separate (one process per service)")
    parser.add_argument("--pyspy", default=None, metavar="OUT", help="py-spy raw stacks of the last round")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an operator setting for `zcbot up` (repeatable), e.g. ZCBOT_DB_POOL_SIZE=8")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zcbot-bench-cpu-"))
    fake = up = None
    try:
        fake_out = work / "fake.out"
        fake = subprocess.Popen([sys.executable, "-m", "zcbot_fakellm"], stdout=fake_out.open("wb"))
        fake_url = f"http://127.0.0.1:{int(wait_line(fake_out, 'READY ', fake, 30).split()[1])}/v1"
        (work / "models").mkdir()
        (work / "models" / "fake.yaml").write_text(PROFILE.format(base=fake_url))
        home = work / "home"
        ports = {name: free_port() for name in SERVICE_PORT_ENV}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY"))}
        env.update({"ZCBOT_HOME": str(home), "ZCBOT_MODELS_DIR": str(work / "models"), "ZCBOT_DEFAULT_MODEL": "fake",
                    FAKE_KEY_ENV: "sk-fake", **{SERVICE_PORT_ENV[n]: str(p) for n, p in ports.items()}})
        env.update(item.split("=", 1) for item in args.env)
        up_out = work / "up.out"
        cmd = [sys.executable, "-m", "zcbot_devstack.cli", "up", *(["--separate"] if args.separate else [])]
        up = subprocess.Popen(cmd, env=env, stdout=up_out.open("wb"), stderr=subprocess.STDOUT)
        wait_line(up_out, "zcbot is up", up, 180)
        if "warming up document previews" in up_out.read_text():  # LibreOffice's warm-up: not a run's CPU
            wait_line(up_out, "document previews ", up, 180)
        secrets = dict(line.split("=", 1) for line in (home / "secrets.env").read_text().splitlines() if "=" in line)
        db_url = json.loads((home / "stack.json").read_text())["db_url"]
        result = asyncio.run(measure(f"http://127.0.0.1:{ports['gateway']}", secrets["PLATFORM_KEY"], fake_url,
                                     up.pid, db_url, args))
        result["pg_backends_after"] = _backends(db_url)
        report = {"mode": "separate" if args.separate else "hosted", "tools": args.tools, "env": args.env,
                  "concurrency": args.concurrency, "durability": "PostgreSQL fsync + synchronous_commit on",
                  "load_average": os.getloadavg(), **result}
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            Path(args.out).write_text(text)
    finally:
        if up is not None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
        if fake is not None:
            fake.terminate()
            fake.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
