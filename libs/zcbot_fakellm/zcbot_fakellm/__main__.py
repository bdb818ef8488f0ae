"""``python -m zcbot_fakellm``: the fake as its own process (the bench, tests of a real stack);
prints ``READY <port>`` once listening, stops on SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Sequence

from zcbot_fakellm.script import DEFAULT_TEXT_CHUNKS
from zcbot_fakellm.server import FakeLLM


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zcbot_fakellm",
        description="Fake OpenAI-compatible LLM server; prints 'READY <port>' when listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--default-chunks",
        type=int,
        default=DEFAULT_TEXT_CHUNKS,
        help="pieces the unscripted 'ok: ...' reply is streamed in",
    )
    parser.add_argument(
        "--default-chunk-delay",
        type=float,
        default=0.0,
        help="seconds between chunks of the unscripted reply (e.g. 0.0333 for 30 chunks/s)",
    )
    parser.add_argument("--strict", action="store_true",
                        help="refuse requests a real provider would refuse (unknown parameters, unpaired tool "
                             "calls, DeepSeek's reasoning_content rule) with its 400")
    parser.add_argument(
        "--max-recorded-requests",
        type=int,
        default=10_000,
        help="keep only this many request bodies for GET /_requests (0 = keep none)",
    )
    return parser.parse_args(argv)


async def _serve_forever(args: argparse.Namespace) -> None:
    fake = FakeLLM(
        args.host,
        args.port,
        default_chunks=args.default_chunks,
        default_chunk_delay=args.default_chunk_delay,
        max_recorded_requests=args.max_recorded_requests,
        strict=args.strict,
    )
    await fake.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"READY {fake.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m zcbot_fakellm``."""
    args = _parse_args(argv)
    try:
        import uvloop  # fewer syscalls per chunk matters with ~1000 streams

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(_serve_forever(args))


if __name__ == "__main__":
    main()
