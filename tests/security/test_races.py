"""Layer 2, root-side file operations: each one, called >= 500 times while a folder on its path
keeps flipping to a symlink out of the root (tests/security/race.py), never reads, writes, creates
or deletes anything outside the root, and the gateway never answers 500.

The in-process operations run with both resolvers (openat2 and the O_NOFOLLOW walk fallback); the
gateway's run through its real HTTP API (the in-process e2e stack). A first test proves the harness
bites: a check-then-use reader like the old `read_text_safely` leaks the canary under it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from tests.helpers.stack import Stack
from tests.security.race import MARKER, Canary, flipping, leaked, until
from zcbot_channels.push_handler import _resolve_file
from zcbot_core.channels.conversation import new_files
from zcbot_core.safe_fs import paths, resolve
from zcbot_core.tools.skill_tools import SkillTools
from zcbot_core.workspace import memory
from zcbot_core.workspace.skills import SkillPaths, registry_for_user
from zcbot_executor.background import files, sweep

N = 500
# The HTTP race sends 7 requests per round (each upload, rename and delete also keeps a version and a
# data_events row since issue 29): 200 rounds still see both outcomes of the race many times over,
# in a quarter of the 81 s that 500 took.
N_HTTP = 200
DAY = 86400.0


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(resolve, "USE_OPENAT2", False)
    return str(request.param)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """(storage root, a canary folder beside it); the user root is storage/alice."""
    storage = tmp_path / "storage"
    (storage / "alice").mkdir(parents=True)
    yield tmp_path


SKILL_MD = "---\nname: mine\ndescription: test skill\n---\nbody\n"


def _canary(host: Path, files: dict[str, str], backdate: float | None = None) -> Canary:
    """In a folder of its own, so that "nothing appeared beside it" is exact."""
    return Canary.plant(host / "outside" / "hostfiles", files, backdate)


def test_the_harness_catches_a_check_then_use_reader(host: Path) -> None:
    """The old pattern (check the path, then open it by path) leaks under the flipper."""
    root = host / "storage" / "alice"
    canary = _canary(host, {"x.md": "{MARKER}"})
    target = root / "refs"
    (target).mkdir()
    (target / "x.md").write_text("mine")
    leaks = tries = 0
    with flipping(target, canary.folder):
        deadline = time.monotonic() + 5
        while until(deadline) and not leaks:
            tries += 1
            path = target / "x.md"
            try:
                if path.is_symlink() or not os.path.realpath(path).startswith(str(root) + "/"):
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # guards only the last component
            except OSError:  # realpath itself races (EINVAL) or the open lands on the link
                continue
            with os.fdopen(fd, "rb") as fh:
                leaks += leaked(fh.read().decode())
    assert leaks, f"no leak in {tries} tries: the harness did not race"
    canary.assert_intact()


async def test_skill_read_and_save(resolver: str, host: Path) -> None:
    root = host / "storage" / "alice"
    canary = _canary(host, {"x.md": "{MARKER}", "SKILL.md": "{MARKER}"})
    skill = root / ".skills" / "mine"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    (skill / "references" / "x.md").write_text("mine")
    tools = SkillTools(registry_for_user(root, SkillPaths.defaults()), root)
    outputs: list[str] = []
    with flipping(skill / "references", canary.folder) as flip:
        for i in range(N):
            outputs.append((await tools.read_skill_file({"name": "mine", "path": "references/x.md"})).output)
            outputs.append((await tools.save_skill({"name": "mine", "path": f"references/n{i % 7}.md",
                                                    "content": "new"})).output)
    with flipping(skill, canary.folder):  # the skill folder itself: SKILL.md saves and the registry scan
        for _ in range(N // 5):
            outputs.append((await tools.save_skill({"name": "mine", "content": SKILL_MD})).output)
            outputs.append(str([s.body for s in registry_for_user(root, SkillPaths.defaults()).list()]))
    with flipping(root / ".skills", canary.folder):  # forks: staged and renamed inside `.skills`
        forks = [(await tools.fork_skill({"name": "mine", "new_name": f"copy{i}"})).output for i in range(N // 10)]
    outputs += forks
    # Refused (a link on the way, or `mine` missing from a registry reloaded mid-flip) or done.
    unexpected = [f for f in forks if not (f.startswith("forked") or "symlink" in f or "no skill named" in f)]
    assert not unexpected, unexpected[:3]
    tools.registry.reload()
    assert (await tools.fork_skill({"name": "mine", "new_name": "calm"})).output.startswith("forked")
    assert not [o for o in outputs if leaked(o)]
    assert any(o == "mine" for o in outputs) and any("symlink" in o for o in outputs), "no race happened"
    assert flip.flips > N
    canary.assert_intact()


def test_memory_reads(resolver: str, host: Path) -> None:
    root = host / "storage" / "alice"
    canary = _canary(host, {"core.md": "{MARKER}", "extended/topic.md": "---\ndescription: {MARKER}\n---\n",
                            "shortcuts.md": "- `x`: {MARKER}\n"})
    (root / ".memory" / "extended").mkdir(parents=True)
    (root / ".memory" / "core.md").write_text("I like tea.")
    (root / ".memory" / "extended" / "topic.md").write_text("---\ndescription: mine\n---\n")
    blocks: list[str] = []
    with flipping(root / ".memory", canary.folder):
        for _ in range(N):
            blocks.append(memory.memory_block(root))
            blocks.append(str(memory.read_memory_file(root, ".memory/shortcuts.md")))
    with flipping(root / ".memory" / "extended", canary.folder / "extended"):
        for _ in range(N):
            blocks.append(memory.memory_block(root))
            try:
                blocks.append(memory.read_extended(root, "topic.md"))
            except FileNotFoundError:
                pass
    assert not [b for b in blocks if leaked(b)]
    assert any("I like tea." in b for b in blocks) and any("mine" in b for b in blocks)
    canary.assert_intact()


def test_executor_proc_files_and_sweep(resolver: str, host: Path) -> None:
    """Issue 19 item 3: backdated exit_code files in a flipping task folder; the sweep removes only
    the user's own terminal procs, never the host folders the link points at."""
    storage = host / "storage"
    root = storage / "alice"
    old = time.time() - 30 * DAY
    host_procs = {f"p{i:08x}/exit_code": "0\n" for i in range(20)}
    host_procs.update({f"p{i:08x}/output.log": "{MARKER}" for i in range(20)})
    host_procs["p00000000/proc.json"] = '{"kind": "shell", "host": "{MARKER}"}'
    canary = _canary(host, host_procs, backdate=old)
    task = root / files.PROCS_DIR / "t1"
    (task / "p00000001").mkdir(parents=True)  # a lost proc of the user's own, finished meanwhile
    removed = 0
    seen: list[str] = []
    with flipping(task, canary.folder) as flip:
        for i in range(N):
            name = f"p{0x100 + i:08x}"  # a terminal proc of the user's own, made through the real fd
            os.mkdir(name, dir_fd=flip.real_fd)
            fd = os.open(f"{name}/exit_code", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=flip.real_fd)
            os.close(fd)
            os.utime(f"{name}/exit_code", (old, old), dir_fd=flip.real_fd)
            removed += sweep.sweep_procs(storage, 7 * DAY)
            proc_dir = task / "p00000000"
            seen.append(str(files.proc_status(proc_dir)))
            seen.append(files.tail(proc_dir / "output.log", 5))
            files.finish(task / "p00000001")  # a write: must never land in the host folder
    assert not [s for s in seen if leaked(s)]
    assert removed >= N // 2, f"the sweep removed only {removed} of the user's {N} terminal procs"
    canary.assert_intact()


def test_channel_push_files(resolver: str, host: Path) -> None:
    """A push's file and a conversation's new files are read through safe_fs, never via the link."""
    storage = host / "storage"
    root = storage / "alice"
    canary = _canary(host, {"f.txt": "{MARKER}", "new.txt": "{MARKER}"})
    (root / "wechat").mkdir()
    (root / "wechat" / "f.txt").write_text("mine")
    svc = SimpleNamespace(settings=SimpleNamespace(storage_root=storage))  # what _resolve_file reads
    got: list[str] = []
    ok = 0
    with flipping(root / "wechat", canary.folder):
        for _ in range(N):
            try:
                data = _resolve_file(svc, "alice", "wechat/f.txt").read_bytes()  # type: ignore[arg-type]
                ok += 1
                got.append(data.decode())
            except paths.PathRejected:
                pass
            for f in _safe(new_files, root, "wechat", 0.0):  # a conversation reply's new files
                try:
                    got.append(f.read_bytes().decode())
                except paths.PathRejected:
                    pass
    assert not [g for g in got if leaked(g)] and ok, (ok, len(got))
    canary.assert_intact()


def _safe(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except paths.PathRejected:
        return []


@pytest.mark.heavy  # a stress loop of the whole files API against flipping links (~7 s): the full run
async def test_gateway_files_api_under_flipping(bare_stack: Stack, host: Path) -> None:
    """list, upload (creating folders: issue item 4), download, mkdir, rename and delete through the
    real HTTP API while `docs` flips: nothing outside the root, never a 5xx. Export (the conversation
    as .docx) touches no file; it runs alongside as a control."""
    stack = bare_stack
    token = await stack.login("alice")
    root = stack.settings.storage_root / "alice"
    canary = _canary(host, {"f.txt": "{MARKER}", "a.txt": "{MARKER}", "d.txt": "{MARKER}", "up.txt": "{MARKER}"})
    task = await stack.create_task(token, "exported")
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "f.txt").write_text("mine")
    (root / "docs" / "a.txt").write_text("mine")
    statuses: dict[str, list[int]] = {}
    bodies: list[str] = []
    sem = asyncio.Semaphore(6)

    async def call(c: httpx.AsyncClient, op: str, method: str, url: str, **kw: object) -> None:
        async with sem:
            r = await c.request(method, url, **kw)  # type: ignore[arg-type]
        statuses.setdefault(op, []).append(r.status_code)
        if op != "export":
            bodies.append(r.text)

    with flipping(root / "docs", canary.folder) as flip:
        async with stack.client(token) as c:
            for chunk in range(0, N_HTTP, 50):
                jobs = []
                for i in range(chunk, chunk + 50):
                    jobs += [
                        call(c, "list", "GET", "/v1/files", params={"path": "docs"}),
                        call(c, "download", "GET", "/v1/files/download", params={"path": "docs/f.txt"}),
                        call(c, "upload", "POST", "/v1/files/upload", params={"path": f"docs/u{i}"},
                             files={"file": ("up.txt", b"uploaded")}),
                        call(c, "upload-flat", "POST", "/v1/files/upload", params={"path": "docs"},
                             files={"file": ("d.txt", b"to delete")}),
                        call(c, "mkdir", "POST", "/v1/files/mkdir", json={"path": f"docs/m{i}/n"}),
                        call(c, "rename", "POST", "/v1/files/rename",
                             json={"path": "docs/a.txt" if i % 2 == 0 else "docs/b.txt",
                                   "new_name": "b.txt" if i % 2 == 0 else "a.txt"}),
                        call(c, "delete", "POST", "/v1/files/delete", json={"path": "docs/d.txt"}),
                    ]
                    if i % 5 == 0:  # export reads only the database: a control, not a file operation
                        jobs.append(call(c, "export", "GET", f"/v1/tasks/{task['task_id']}/export"))
                await asyncio.gather(*jobs)
    for op, codes in statuses.items():
        assert len(codes) >= (N_HTTP // 5 if op == "export" else N_HTTP) and not [s for s in codes if s >= 500], (op, sorted(set(codes)))
        assert set(codes) <= {200, 201, 400, 404, 409}, (op, sorted(set(codes)))
    assert all(s == 200 for s in statuses["export"])
    for op in ("list", "download", "upload", "mkdir"):
        assert any(s in (200, 201) for s in statuses[op]), f"{op} never succeeded: no real folder seen"
        assert any(s == 400 for s in statuses[op]), f"{op} was never refused: the flipper did not race it"
    assert not [b for b in bodies if leaked(b) or str(canary.folder) in b]
    assert MARKER not in (root / "docs" / "f.txt").read_text()
    assert flip.flips > N_HTTP
    canary.assert_intact()
