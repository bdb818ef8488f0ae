"""`python -m bench.soak [--users 4] [--tasks 5] [--rounds 6] [--seed 1]`: a day in the life (issue 34).

The real `zcbot up` (embedded NATS and PostgreSQL, every service; `--separate` so one service's process
can be killed) with the scripted model behind a profile file, driven as several users would use it
over a day: each user warms their sandbox in a first task, then opens more tasks, uploads a file into
each, and sends rounds of messages chosen from a seed — writes, edits of the uploaded file, slow
answers, cancels, `multitask=interrupt` and `enqueue` sent behind a running or waiting run, background
jobs that outlive their run (at most two per user: the executor's limit is three). The runner's process
is killed once mid-day while a round's runs are on it (the supervisor restarts it; the runs it held are
redelivered and taken over: `actions` counts the runs resumed by another attempt). At the end every
task writes once more, and `zcbot up` gets Ctrl-C (SIGINT to its process group, as a terminal sends it).

Checked (each failure is a line in `violations`): every run ends (its stream's `done`), every accepted
message is in its task's history in the order it was sent and is answered (a reply, or the cancel
notice, also for a run cancelled or replaced while it waited for a slot) before the next one, every task's folder is writable at the end (the last write lands,
owned by the sandbox identity's uid like the first task's), nothing is left `waiting`/`queued`/
`running`/`cancelling` or with pending inputs, every usage row belongs to a run of this day and every
run that ended `ok` has one, and after Ctrl-C `zcbot up` exits within 15 s and no process of it
(sandbox, background job, embedded server) survives.

Prints one JSON document; exit status 1 when there is a violation. tests/soak/test_day.py runs a
small day of it in CI's heavy step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.soak_stack import STOP_BUDGET_S, Up
from zcbot_core.agent.loop import RESTARTED_RESULT
from zcbot_fakellm import FakeLLM

ACTIVE = ("waiting", "queued", "running", "cancelling")
BACKGROUND_PER_USER = 2
NOTABLE_LOG_LINES = {"reaped": "reaped lost run", "done published for an ended run": "published its done",
                     "superseded": "taken over by another runner", "requeued": "published it again"}


@dataclass
class SoakConfig:
    users: int = 4
    tasks: int = 5
    rounds: int = 6
    seed: int = 1
    max_runs_per_user: int = 2
    kill_runner_after_round: int = 1  # -1: never


@dataclass
class Posted:
    """One accepted message: its task, text and run (the run id and how its stream ended)."""
    user: str
    task_id: str
    content: str
    run_id: str
    events_url: str
    outcome: str | None = None
    tool_errors: list[str] = field(default_factory=list)


@dataclass
class Day:
    config: SoakConfig
    posted: list[Posted] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)


def _turns(kind: str, key: str, n: int) -> list[dict[str, Any]]:
    """The scripted model's answer for one message of `kind`."""
    if kind == "write":
        return [{"tool_calls": [{"name": "write", "arguments": {"path": f"notes/{key}.md", "content": f"# {key}\n"}}]},
                {"text": f"wrote {key}"}]
    if kind == "edit_upload":
        return [{"tool_calls": [{"name": "edit", "arguments": {"path": "upload.txt", "old_str": "\nline two",
                                                         "new_str": f"\nline {n}\nline two"}}]},
                {"text": "edited"}]
    if kind == "background":
        return [{"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 600", "background": True}}]},
                {"text": "job started"}]
    if kind == "shell":
        return [{"tool_calls": [{"name": "shell", "arguments": {"command": f"echo {key} >> log.txt && ls"}}]},
                {"text": "listed"}]
    # slow: a long answer the user may cancel, interrupt or queue behind
    return [{"text": f"a slow answer to {key} " * 8, "first_delay": 1.5, "chunk_delay": 0.4}]


def _brief(message: dict[str, Any]) -> str:
    """A history item in a few characters (a violation names the messages around it)."""
    text = message.get("content")
    calls = [c.get("function", {}).get("name") for c in message.get("tool_calls") or []]
    return f"{message.get('role')}:{(text if isinstance(text, str) else '')[:24]}{calls or ''}"


class Driver:
    def __init__(self, up: Up, fake: FakeLLM, day: Day) -> None:
        self.up, self.fake, self.day = up, fake, day
        self.rng = random.Random(day.config.seed)
        self.background: Counter[str] = Counter()  # background jobs asked for, per user
        self.counter = 0

    async def _client(self, user: str) -> httpx.AsyncClient:
        c = httpx.AsyncClient(base_url=self.up.base, timeout=60)
        r = await c.post("/v1/auth/login", json={"user_id": user, "platform_key": self.up.platform_key})
        r.raise_for_status()
        c.headers["Authorization"] = f"Bearer {r.json()['token']}"
        return c

    async def send(self, c: httpx.AsyncClient, user: str, task_id: str, kind: str, multitask: str = "enqueue") -> Posted | None:
        self.counter += 1
        key = f"SOAK{self.counter:05d}"
        self.fake.script(key, _turns(kind, key, self.counter))
        content = f"{key} {kind}"
        r = await c.post(f"/v1/tasks/{task_id}/messages", json={"content": content, "multitask": multitask})
        self.day.actions[f"{kind}/{multitask}"] += 1
        if r.status_code != 202:
            self.day.refused[f"{r.status_code} {r.json().get('code', '')}"] += 1
            if r.status_code >= 500:
                self.day.violations.append(f"{user}/{task_id}: {content!r} answered {r.status_code}: {r.text[:200]}")
            return None
        body = r.json()
        posted = Posted(user, task_id, content, body["run_id"], body["events_url"])
        self.day.posted.append(posted)
        return posted

    async def user_day(self, index: int) -> None:
        user = f"soak-{index}"
        c = await self._client(user)
        try:
            tasks = [(await c.post("/v1/tasks", json={"name": "任务 1"})).json()]
            first = await self.send(c, user, tasks[0]["task_id"], "write")  # the sandbox is warm from here on
            if first:
                await self.finish(c, first)
            for t in range(1, self.day.config.tasks):
                r = await c.post("/v1/tasks", json={"name": f"任务 {t + 1}"})
                if r.status_code != 201:
                    self.day.violations.append(f"{user}: task {t + 1} not created: {r.status_code} {r.text[:200]}")
                    continue
                tasks.append(r.json())
            for task in tasks:
                files = {"file": ("upload.txt", b"line one\nline two\n", "text/plain")}
                r = await c.post("/v1/files/upload", params={"path": task["working_dir"]}, files=files)
                if r.status_code != 201:
                    self.day.violations.append(f"{user}: upload into {task['working_dir']}: {r.status_code} {r.text[:200]}")
            for round_no in range(self.day.config.rounds):
                rounds = [self.round(c, user, task) for task in tasks]
                if round_no == self.day.config.kill_runner_after_round and index == 0:
                    rounds.append(self.kill_runner())  # while this round's runs are in flight
                await asyncio.gather(*rounds)
            await self.settle(c, tasks)
            for task in tasks:  # every folder writable at the end
                last = await self.send(c, user, task["task_id"], "write", multitask="enqueue")
                if last:
                    await self.finish(c, last)
                    if last.outcome != "ok":
                        self.day.violations.append(f"{user}/{task['name']}: the last write ended {last.outcome}")
        finally:
            await c.aclose()

    async def kill_runner(self) -> None:
        """SIGKILL the runner once the round's first runs are on it; they are redelivered to its restarted
        copy (JetStream's ack_wait) and taken over there."""
        await asyncio.sleep(0.6)
        self.day.actions["runner killed"] += 1
        back = await asyncio.to_thread(self.up.kill_service, "runner")
        self.day.actions[f"runner back after {back:.1f} s"] += 1

    async def round(self, c: httpx.AsyncClient, user: str, task: dict[str, Any]) -> None:
        """One round in one task: a message of a random kind, sometimes followed by a cancel, an
        interrupt or a queued message while it is still active."""
        tid = task["task_id"]
        kind = self.rng.choice(["write", "edit_upload", "shell", "slow", "slow", "background"])
        if kind == "background":
            # The jobs run on (`sleep 600`, until Ctrl-C): a user's stay under the executor's limit of
            # running jobs (ZCBOT_MAX_BG_PROCS, 3), whose refusal would be right, not a defect.
            self.background[user] += 1
            kind = "background" if self.background[user] <= BACKGROUND_PER_USER else "shell"
        follow = self.rng.choice(["wait", "wait", "cancel", "interrupt", "enqueue"])
        posted = await self.send(c, user, tid, kind)
        if posted is None:
            return
        await asyncio.sleep(self.rng.uniform(0.05, 0.8))
        if follow == "cancel":
            r = await c.post(f"/v1/tasks/{tid}/cancel")
            self.day.actions["cancel"] += 1
            if r.status_code >= 500:
                self.day.violations.append(f"{user}/{tid}: cancel answered {r.status_code}: {r.text[:200]}")
        elif follow in ("interrupt", "enqueue"):
            await self.send(c, user, tid, self.rng.choice(["write", "slow"]), multitask=follow)
        for p in [p for p in self.day.posted if p.task_id == tid and p.outcome is None]:
            await self.finish(c, p)

    async def finish(self, c: httpx.AsyncClient, posted: Posted, timeout: float = 180.0) -> None:
        """Read a run's stream to its `done` (its outcome), or record that it never ended."""
        try:
            async with asyncio.timeout(timeout), c.stream("GET", posted.events_url) as r:
                event = None
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "run_start" and json.loads(line[6:]).get("attempt", 1) > 1:
                        self.day.actions["run resumed by another attempt"] += 1
                    elif line.startswith("data: ") and event == "tool_result":
                        data = json.loads(line[6:])
                        # A call cut off by the runner kill gets the honest "may or may not have run"
                        # result (docs/reliability.md), then the run goes on: not a tool failing.
                        if str(data.get("preview")).startswith(RESTARTED_RESULT[:60]):
                            self.day.actions["tool call cut off by the runner kill"] += 1
                        elif not data.get("ok", True):
                            posted.tool_errors.append(f"{data.get('name')}: {str(data.get('preview'))[:160]}")
                    elif line.startswith("data: ") and event == "done":
                        posted.outcome = json.loads(line[6:]).get("status", "?")
                        if posted.outcome == "ok" and posted.tool_errors:
                            self.day.violations.append(f"{posted.user}/{posted.task_id}: {posted.content!r}: a tool "
                                                       f"failed: {posted.tool_errors}")
                        return
        except (TimeoutError, httpx.HTTPError) as exc:
            posted.outcome = f"no end ({type(exc).__name__})"
        if posted.outcome is None:
            posted.outcome = "stream closed without done"
        if not posted.outcome or posted.outcome.startswith(("no end", "stream closed")):
            self.day.violations.append(f"{posted.user}/{posted.task_id}: run {posted.run_id} ({posted.content!r}): "
                                       f"{posted.outcome}")

    async def settle(self, c: httpx.AsyncClient, tasks: list[dict[str, Any]], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for task in tasks:
            while True:
                status = (await c.get(f"/v1/tasks/{task['task_id']}")).json().get("run_status")
                if status not in ACTIVE:
                    break
                if time.monotonic() > deadline:
                    self.day.violations.append(f"{task['task_id']} still {status} {timeout:g} s after the day's end")
                    break
                await asyncio.sleep(0.25)

    async def check_history(self) -> None:
        """Every accepted message in its task's history, in order, each answered before the next."""
        by_task: dict[str, list[Posted]] = {}
        for p in self.day.posted:
            by_task.setdefault(p.task_id, []).append(p)
        for tid, sent in by_task.items():
            c = await self._client(sent[0].user)
            try:
                items: list[dict[str, Any]] = []
                page = 1
                while True:
                    r = await c.get(f"/v1/tasks/{tid}/messages", params={"page": page, "page_size": 200})
                    body = r.json()
                    items += body["items"]
                    if len(items) >= body["total"] or not body["items"]:
                        break
                    page += 1
            finally:
                await c.aclose()
            items = [m["payload"] for m in items if isinstance(m.get("payload"), dict)]
            texts = [m.get("content") for m in items if m.get("role") == "user"]
            want = [p.content for p in sent]
            if [t for t in texts if t in want] != want:
                self.day.violations.append(f"task {tid}: history {texts} is not the messages sent {want}")
            for i, m in enumerate(items):
                if m.get("role") != "user":
                    continue
                nxt = items[i + 1] if i + 1 < len(items) else None
                if nxt is None or nxt.get("role") == "user":
                    outcome = next((p.outcome for p in sent if p.content == m.get("content")), None)
                    self.day.violations.append(
                        f"task {tid}: {m.get('content')!r} (its run ended {outcome}) was never answered; the "
                        f"history: {[_brief(x) for x in items]}")

    async def explain_unended(self) -> list[dict[str, Any]]:
        """For each run whose stream never said `done`: its task's row, its stored messages, its stream
        read once more (does it hold the `done` a live reader missed?) and the log lines naming it."""
        found = []
        log = self.up.out.read_text(errors="replace").splitlines()
        for p in self.day.posted:
            if not (p.outcome or "").startswith(("no end", "stream closed")):
                continue
            with psycopg.connect(self.up.db_url) as conn:
                row = conn.execute("select run_status, run_id, run_owner, run_events_from, pending_inputs from tasks "
                                   "where task_id = %s", (p.task_id,)).fetchone()
                stored = conn.execute("select idx, payload->>'role', kind from messages where task_id = %s and "
                                      "run_id = %s order by idx", (p.task_id, p.run_id)).fetchall()
            events: list[str] = []
            c = await self._client(p.user)
            try:
                async with asyncio.timeout(10), c.stream("GET", p.events_url) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("event: "):
                            events.append(line[7:])
            except (TimeoutError, httpx.HTTPError) as exc:
                events.append(f"({type(exc).__name__})")
            finally:
                await c.aclose()
            found.append({"run_id": p.run_id, "content": p.content,
                          "task": [row[0], row[1], row[2], row[3], [i.get("run_id") for i in row[4] or []]] if row else None,
                          "stored": stored, "stream_again": events,
                          "log": [line for line in log if p.run_id in line or p.task_id in line][:20]})
        return found

    def check_database(self) -> None:
        with psycopg.connect(self.up.db_url) as conn:
            stuck = conn.execute("select task_id, run_status, pending_inputs from tasks where run_status = any(%s) "
                                 "or coalesce(pending_inputs::text, '[]') not in ('[]', 'null')", (list(ACTIVE),)).fetchall()
            usage_runs = {r for (r,) in conn.execute("select distinct run_id from usage_events where run_id is not null")}
        for row in stuck:
            self.day.violations.append(f"task left active or with pending input: {row}")
        ours = {p.run_id for p in self.day.posted}
        if stray := usage_runs - ours:
            self.day.violations.append(f"usage rows of runs nobody sent: {sorted(stray)[:5]}")
        if unbilled := {p.run_id for p in self.day.posted if p.outcome == "ok"} - usage_runs:
            self.day.violations.append(f"runs that ended ok with no usage row: {sorted(unbilled)[:5]}")

    def check_folders(self) -> None:
        """The last write of every task landed, owned like the first task's file (the sandbox's uid)."""
        owners = set()
        for p in self.day.posted:
            if p.content.endswith(" write") and p.outcome == "ok":
                key = p.content.split()[0]
                found = list((self.up.home / "users" / p.user).glob(f"*/notes/{key}.md"))
                if not found:
                    self.day.violations.append(f"{p.user}: {key}.md reported written but not on disk")
                owners.update(f.stat().st_uid for f in found)
        if len(owners) > 1:
            self.day.violations.append(f"written files have several owners: {sorted(owners)}")


async def _day(work: Path, config: SoakConfig) -> dict[str, Any]:
    fake = await FakeLLM(strict=True).start()
    day = Day(config)
    t0 = time.monotonic()
    up = await asyncio.to_thread(Up, work, fake.base_url, config.max_runs_per_user)
    result: dict[str, Any] = {"ready_s": round(time.monotonic() - t0, 1)}
    try:
        driver = Driver(up, fake, day)
        t1 = time.monotonic()
        await asyncio.gather(*(driver.user_day(i) for i in range(config.users)))
        result["day_s"] = round(time.monotonic() - t1, 1)
        if unended := await driver.explain_unended():
            result["unended"] = unended
        await driver.check_history()
        driver.check_database()
        driver.check_folders()
    finally:
        took, left = await asyncio.to_thread(up.ctrl_c)
        await fake.stop()
    result["ctrl_c_s"] = round(took, 1)
    if took > STOP_BUDGET_S:
        day.violations.append(f"zcbot up took {took:.1f} s to stop after Ctrl-C (budget {STOP_BUDGET_S:g} s)")
    if left:
        day.violations.append(f"processes left after Ctrl-C: {left}")
    log = up.out.read_text(errors="replace")
    # What the stack itself reported of the day's faults (a reap or a late `done` is a recovery, not a defect).
    result["recoveries"] = {what: log.count(line) for what, line in NOTABLE_LOG_LINES.items() if line in log}
    if day.violations:
        result["up_log_tail"] = log[-4000:]
    result.update(runs=len(day.posted), outcomes=dict(Counter(p.outcome for p in day.posted)),
                  refused=dict(day.refused), actions=dict(day.actions), violations=day.violations)
    return result


def run(config: SoakConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="zcbot-soak-") as tmp:
        os.chmod(tmp, 0o755)  # the embedded PostgreSQL's OS user must reach its data dir when run as root
        return asyncio.run(_day(Path(tmp), config))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=5, help="tasks per user")
    parser.add_argument("--rounds", type=int, default=6, help="messages per task (plus follow-ups)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run(SoakConfig(users=args.users, tasks=args.tasks, rounds=args.rounds, seed=args.seed))
    print(json.dumps(result, ensure_ascii=False, indent=2))
    sys.exit(1 if result["violations"] else 0)


if __name__ == "__main__":
    main()
