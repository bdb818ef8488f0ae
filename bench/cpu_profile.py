"""`python -m bench.cpu_profile STACKS [--top 40] [--match TEXT]`: sums py-spy's raw collapsed stacks
(`bench.cpu --pyspy STACKS`) into where the CPU went: self samples by file (the leaf frame's file),
inclusive samples by function (every function on a stack counted once), each as a share of all
samples. `--match TEXT` keeps only stacks with a frame containing TEXT (e.g. `llm/client.py`)."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def parse(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        body, _, count = line.rpartition(" ")
        if not body or not count.isdigit():
            continue
        frames = []
        for raw in body.split(";"):
            m = FRAME.match(raw)
            frames.append((m["func"], m["file"]) if m else (raw, "?"))
        stacks.append((frames, int(count)))
    return stacks


# Components, first match wins (a stack is counted once, under the first rule any of its frames meets).
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("PostgreSQL: opening connections", ("_connect_gen", "AsyncConnection.connect")),
    ("LiteLLM (and its HTTP client)", ("litellm", "llm_http_handler", "streaming_handler", "aiohttp")),
    ("PostgreSQL: statements (SQLAlchemy, psycopg)", ("sqlalchemy/", "psycopg/")),
    ("SSE relay (gateway)", ("zcbot_gateway/sse.py", "zcbot_gateway/events")),
    ("HTTP server (uvicorn, Starlette, FastAPI)", ("uvicorn/", "starlette/", "fastapi/")),
    ("NATS / JetStream client", ("nats/",)),
    ("logging", ("logging/", "zcbot_core/platform/logs.py")),
    ("event encoding (bus codec, JSON)", ("zcbot_core/bus/", "json/")),
    ("executor (tools)", ("zcbot_executor/",)),
    ("runner (other)", ("zcbot_runner/", "zcbot_core/agent/")),
    ("idle thread-pool workers", ("concurrent/futures/thread.py",)),
]


def component(frames: list[tuple[str, str]]) -> str:
    for name, needles in COMPONENTS:
        if any(n in func or n in file for func, file in frames for n in needles):
            return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_profile", description=__doc__)
    parser.add_argument("stacks", type=Path)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default=None)
    args = parser.parse_args()
    stacks = parse(args.stacks)
    if args.match:
        stacks = [(f, n) for f, n in stacks if any(args.match in a or args.match in b for a, b in f)]
    total = sum(n for _, n in stacks) or 1
    by_file: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, n in stacks:
        by_file[frames[-1][1]] += n
        for name in {f"{func} ({file})" for func, file in frames}:
            inclusive[name] += n
    print(f"{total} samples")
    comps: Counter[str] = Counter()
    for frames, n in stacks:
        comps[component(frames)] += n
    print("\n-- by component (first rule a stack meets) --")
    for name, n in comps.most_common():
        print(f"{100 * n / total:5.1f}%  {name}")
    print("\n-- self, by file --")
    for name, n in by_file.most_common(args.top):
        print(f"{100 * n / total:5.1f}%  {name}")
    print("\n-- inclusive, by function --")
    for name, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
