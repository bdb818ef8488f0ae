"""Long shell/run_python outputs kept in the task folder (issue 40, seed 003 §8.2 "长结果落文件留路径").

Past the model's limit the whole output is written inside the sandbox to `.zcbot/outputs/<name>.txt`
in the task folder (so it counts in the user's quota), the truncated result names it, and `read`
reaches it. Through the real executor (bwrap) on the real NATS.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.executor_stack import Stack
from zcbot_core.tools.results import MODEL_LIMIT
from zcbot_executor.inside import tools_exec

SAVED = re.compile(r"`(\.zcbot/outputs/[0-9]{8}-[0-9]{6}-[0-9a-f]{8}\.txt)`")


def _saved(one: Stack, output: str) -> tuple[str, Path]:
    m = SAVED.search(output)
    assert m, output[-600:]
    return m.group(1), one.storage / "u1" / "task" / m.group(1)


def test_sandbox_limit_is_the_model_limit() -> None:
    assert tools_exec.MODEL_CHARS == MODEL_LIMIT  # the sandbox module cannot import zcbot_core


@pytest.mark.parametrize("first", [100, 10_000, 16_000, 16_001, 65_536])
def test_the_saved_file_is_whole_however_the_pipe_reads_come(tmp_path: Path, first: int) -> None:
    """A loaded machine reads the pipe in uneven chunks: a small read, then full 64K ones (the first
    version lost what the 64K tail had dropped before the file was opened)."""
    data = b"".join(b"%06d-" % i + b"y" * 33 + b"\n" for i in range(10_000))  # 400 000 bytes
    call = tools_exec.Call("c1", 0, -1, 1.0, None)
    call.spill_dir = str(tmp_path / "outputs")
    sizes = [first] + [tools_exec.READ_CHUNK] * (len(data) // tools_exec.READ_CHUNK + 1)
    at = 0
    for n in sizes:
        if at < len(data):
            call.feed(data[at:at + n])
            at += n
    rel = call.close_spill()
    assert rel is not None and (tmp_path / "outputs" / rel.rsplit("/", 1)[1]).read_bytes() == data
    small = tools_exec.Call("c2", 0, -1, 1.0, None)
    small.spill_dir = str(tmp_path / "small")
    small.feed(b"z" * 16_000)
    assert small.close_spill() is None and not (tmp_path / "small").exists()


async def test_long_output_is_saved_and_readable(one: Stack) -> None:
    # 800 000 bytes: past the sandbox's own 64K head+tail too, whose middle the reply drops
    r = await one.call("run_python", {"code": "for i in range(20000):\n    print(f'line-{i:05d}-' + 'x' * 28)\n"})
    assert r.ok, r.error
    assert len(r.output) <= MODEL_LIMIT and r.meta["truncated"] is True
    rel, path = _saved(one, r.output)
    assert r.meta["output_file"] == rel
    data = path.read_text()
    assert data == "".join(f"line-{i:05d}-{'x' * 28}\n" for i in range(20000))  # whole, middle included
    assert "800000 bytes in total" in r.output, r.output[-400:]
    # the agent reads any part of it with `read` (offset/limit), relative to the task folder
    page = await one.call("read", {"path": rel, "offset": 10001, "limit": 2})
    assert page.ok, page.error
    assert "line-10000-" in page.output and "line-10001-" in page.output and "line-10002-" not in page.output
    # ... and searches it with grep
    found = await one.call("grep", {"pattern": "line-1234[5]-", "path": rel})
    assert found.ok and "line-12345-" in found.output, found.output


async def test_short_outputs_leave_no_file(one: Stack) -> None:
    r = await one.shell("echo short")
    assert r.ok and r.output.strip() == "short" and "output_file" not in r.meta
    # 10 000 Chinese characters are 30 000 bytes but within the model's 16 000 characters: no file kept
    r = await one.call("run_python", {"code": "print('长' * 10000)"})
    assert r.ok and r.output.strip() == "长" * 10000 and "output_file" not in r.meta
    outputs = one.storage / "u1" / "task" / ".zcbot" / "outputs"
    assert not outputs.exists() or list(outputs.iterdir()) == []


async def test_failed_call_keeps_the_pointer_after_the_error_prefix(one: Stack) -> None:
    r = await one.shell("python3 -c \"print('y' * 40000)\"; exit 3")
    assert not r.ok and r.error == "exit code 3"
    rel, path = _saved(one, r.output)
    assert path.read_text() == "y" * 40000 + "\n"
    # the runner shows "ERROR: <error>\n<output>" and cuts at the model limit: the pointer survives
    assert len(f"ERROR: {r.error}\n{r.output}") <= MODEL_LIMIT


async def test_saved_outputs_are_not_file_changes(one: Stack) -> None:
    """The kept output is the tool's log, not the user's work: no data event, no version."""
    r = await one.shell("python3 -c \"print('z' * 30000)\" && echo made > made.txt")
    assert r.ok and r.meta.get("output_file")
    paths = [c.get("path") for c in r.meta.get("file_changes") or []]
    assert any(p and p.endswith("made.txt") for p in paths), paths
    assert not any(p and ".zcbot" in p for p in paths), paths


async def test_saved_output_counts_in_the_disk_quota(stack: Stack) -> None:
    """The file is written by the sandbox into the user's folder: the quota sees it like any other."""
    await stack.executor("h1", env={"ZCBOT_USER_DISK_QUOTA_MB": "1"})
    r = await stack.shell("head -c 1500000 /dev/zero | tr '\\0' q")  # 1.5 MB of output, 1 MB quota
    assert not r.ok and "disk quota exceeded" in r.error, (r.error, r.output[-300:])
    outputs = stack.storage / "u1" / "task" / ".zcbot" / "outputs"
    kept = sum(p.stat().st_size for p in outputs.iterdir()) if outputs.exists() else 0
    assert kept > 0  # what the command printed went to the user's folder, so the meter charged it
    r = await stack.shell("rm -rf .zcbot/outputs && echo freed")
    assert r.ok and "freed" in r.output, r.error
