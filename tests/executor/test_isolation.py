"""What code inside a bwrap sandbox can and cannot reach — asserted from inside real tool calls
through the NATS executor service — and how abusive commands are contained and cleaned up."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from urllib.parse import urlparse

import psutil

from tests.helpers.executor_stack import Stack, sandbox_processes, wait_no_processes

REPO = Path(__file__).resolve().parents[2]


async def test_other_users_and_host_files_are_invisible(one: Stack) -> None:
    other = one.storage / "u2"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("u2-private-data")
    r = await one.shell(
        f"cat ../u2/secret.txt /workspace/../u2/secret.txt {other}/secret.txt; "
        "cat /etc/shadow; ls /work /root/.ssh /home; "
        f"for f in /work/main/pyproject.toml {REPO}/pyproject.toml {REPO}/services; do test -e $f && echo VISIBLE $f; done; "
        f"echo repo: $(ls -A {REPO} 2>/dev/null); "
        "grep -rs u2-private-data /workspace /opt /etc /var 2>/dev/null | head -3; "
        "ls /etc/ssl; ls /; echo done")
    assert r.output.rstrip().endswith("done"), r.output
    assert "u2-private-data" not in r.output
    assert "VISIBLE" not in r.output and "private" not in r.output
    assert "/etc/shadow: No such file" in r.output
    # the project tree is not there; at most the python venv inside it is (read-only)
    repo_line = next(line for line in r.output.splitlines() if line.startswith("repo:"))
    assert set(repo_line.split()[1:]) <= {".venv", "venv"}, repo_line
    python_dirs = one.services[0][0].backend.python_dirs
    if not any(p.startswith("/work") for p in python_dirs):
        assert "/work': No such file" in r.output
    # A top-level folder may appear only as the (read-only) parent of a mounted python install,
    # e.g. /work when the venv is /work/main/.venv; nothing else of it is there (checked above).
    python_tops = {p.strip("/").split("/")[0] for p in python_dirs}
    top = set(r.output.split("done")[0].split()) & ({"work", "home", "mnt", "srv", "boot", "farm"} - python_tops)
    assert not top, top
    r = await one.call("read", {"path": "/workspace/../u2/secret.txt"})
    assert not r.ok and "outside /workspace" in r.error
    # nothing is writable but the user's own root and /tmp
    r = await one.shell("for d in /usr /etc /opt/zcbot /bin /tmp/venv; do touch $d/x 2>/dev/null && echo WROTE $d; done; "
                        "touch /workspace/ok /tmp/ok && echo writable")
    assert "WROTE" not in r.output and "writable" in r.output


async def test_only_sandbox_processes_are_visible(one: Stack) -> None:
    r = await one.shell("ps -eo pid,comm --no-headers")
    assert r.ok, r.error
    comms = [line.split(None, 1)[1] for line in r.output.strip().splitlines()]
    assert set(comms) <= {"bwrap", "python", "python3", "bash", "ps"}, comms
    assert len(comms) <= 5
    r = await one.shell("kill -0 1 && echo pid1; ls /proc | grep -c '^[0-9]'")
    assert int(r.output.split()[-1]) <= 6
    r = await one.shell("id -u; unshare --user --map-root-user true && echo NESTED_USERNS; "
                        "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
    assert r.output.split()[0] == "1000" and "NESTED_USERNS" not in r.output, r.output
    assert "CapEff:\t0000000000000000" in r.output and "NoNewPrivs:\t1" in r.output


async def test_no_network_at_all(one: Stack, nats_server_url: str) -> None:
    nats_port = urlparse(nats_server_url).port
    host_ips = sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                       if a.family.name == "AF_INET" and not a.address.startswith("127.")})
    targets = [("127.0.0.1", nats_port), ("::1", nats_port), ("8.8.8.8", 53), ("169.254.169.254", 80)]
    targets += [(ip, nats_port) for ip in host_ips]
    code = (
        "import json, socket\nres = {}\n"
        f"for host, port in {targets!r}:\n"
        "    try:\n        socket.create_connection((host, port), timeout=2).close(); res[f'{host}:{port}'] = 'CONNECTED'\n"
        "    except OSError as e:\n        res[f'{host}:{port}'] = str(e)\n"
        "try:\n    socket.getaddrinfo('example.com', 443); res['dns'] = 'RESOLVED'\n"
        "except OSError as e:\n    res['dns'] = str(e)\n"
        "print(json.dumps(res))\n")
    r = await one.call("run_python", {"code": code})
    assert r.ok, r.error
    res = json.loads(r.output)
    assert len(res) == len(targets) + 1
    assert "CONNECTED" not in res.values() and "RESOLVED" not in res.values(), res


async def test_service_environment_does_not_leak(stack: Stack, monkeypatch) -> None:
    monkeypatch.setenv("ZCBOT_FAKE_SECRET", "s3cr3t-value-should-not-leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-should-not-leak")
    await stack.executor("h1")
    r = await stack.shell("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo end")
    assert r.ok, r.error
    assert "s3cr3t-value" not in r.output and "sk-fake-key" not in r.output
    assert "ZCBOT" not in r.output and "NATS" not in r.output
    assert "HOME=/workspace" in r.output


async def test_fork_bomb_is_contained(one: Stack) -> None:
    peak = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(sandbox_processes(lambda c: "bomb-marker" in c)))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    r = await one.shell(": bomb-marker; :(){ :|:& };:; sleep 2; echo leader-done", timeout=4)
    done.set()
    await sampler
    assert peak > 50, peak  # the bomb did go off ...
    assert peak <= 256 + 5, peak  # ... and stopped at the sandbox's process budget (RLIMIT_NPROC)
    assert "Resource temporarily unavailable" in r.output or "retry" in r.output or not r.ok, r
    assert await wait_no_processes() == []
    r = await one.shell("echo still-serving")
    assert r.ok and r.output.strip() == "still-serving"


async def test_memory_hog_is_contained(stack: Stack) -> None:
    await stack.executor("h1", env={"ZCBOT_SANDBOX_MEMORY_MB": "512"})  # the default is 2048; smaller keeps the test fast
    one = stack
    r = await one.call("run_python", {"code": "chunks = []\nwhile True:\n    chunks.append(bytearray(200 * 1024 * 1024))\n"})
    assert not r.ok and "MemoryError" in r.output, (r.error, r.output[-500:])
    r = await one.shell("python3 -c 'x = bytearray(8 * 1024**3)'")
    assert not r.ok and "MemoryError" in r.output


async def test_output_flood_is_cut(one: Stack) -> None:
    line = f"flood-line-{secrets.token_hex(4)}"  # unique: the scan sees other tests' and workers' processes
    r = await one.shell(f"yes {line}")
    assert not r.ok and "output exceeded" in r.error
    assert len(r.output) <= 16_000 and r.meta["truncated"] is True
    assert r.meta["output_bytes"] > 10 * 1024 * 1024
    assert await wait_no_processes(lambda c: line in c) == []


async def test_infinite_loop_is_killed(one: Stack) -> None:
    r = await one.call("run_python", {"code": "while True:\n    pass\n"}, timeout=1.5)
    assert not r.ok and "timed out after 1.5 s" in r.error and r.meta["timed_out"] is True
    # Only this process's own sandboxes (the call is a child of its warm runner): other workers run Python too.
    assert await wait_no_processes(lambda c: "zcbot-run-" in c, mine_only=True) == []


async def test_no_process_outlives_its_call(one: Stack) -> None:
    # Durations unique to this test run: the leftover scan sees every process on the machine, and
    # another session may be running this same test at the same moment.
    base = secrets.randbelow(80_000) + 10_000
    n = [base + i for i in range(4)]
    r = await one.shell(f"nohup sleep {n[0]} >/dev/null 2>&1 & setsid sleep {n[1]} >/dev/null 2>&1 & "
                        f"(setsid sh -c 'sleep {n[2]}' &) ; sleep {n[3]} & echo started")
    assert r.ok and "started" in r.output, r.error
    ours = tuple(f"sleep {x}" for x in n) + (f"sh -c sleep {n[2]}",)
    leftovers = await wait_no_processes(lambda c: c.startswith(ours))
    assert leftovers == []


async def test_a_process_that_keeps_forking_does_not_outlive_its_call(one: Stack) -> None:
    # A stray that forks while the end-of-call sweep reads /proc leaves a child the sweep never
    # listed; the sweep repeats until a pass finds nobody new (tools_exec.sweep_strays).
    tag = secrets.randbelow(80_000) + 10_000
    r = await one.shell(f"setsid sh -c 'while :; do sleep {tag} & done' >/dev/null 2>&1 & sleep 0.3; echo started")
    assert r.ok and "started" in r.output, r.error
    leftovers = await wait_no_processes(lambda c: c in (f"sleep {tag}", f"sh -c while :; do sleep {tag} & done"))
    assert leftovers == []


async def test_multiprocessing_works_and_shm_is_private(one: Stack) -> None:
    # Batch data scripts (the seed's run_python use case) need POSIX semaphores: /dev/shm must be
    # writable inside the sandbox (issue 26 item 7), and it is the sandbox's own, not the host's.
    marker = f"zcbot-shm-{secrets.token_hex(4)}"
    Path("/dev/shm", marker).write_text("host")
    try:
        code = (
            "import json, os, multiprocessing as mp\n"
            "def square(x):\n    return x * x\n"
            "lock = mp.Lock()\n"
            "with lock:\n    pass\n"
            "with mp.Pool(2) as pool:\n    squares = pool.map(square, range(10))\n"
            "st = os.stat('/dev/shm')\n"
            f"print(json.dumps({{'squares': squares, 'mode': oct(st.st_mode & 0o7777), 'host': os.path.exists('/dev/shm/{marker}')}}))\n")
        r = await one.call("run_python", {"code": code}, timeout=60)
        assert r.ok, r.error
        res = json.loads(r.output.strip().splitlines()[-1])
        assert res == {"squares": [x * x for x in range(10)], "mode": "0o1777", "host": False}, res
    finally:
        Path("/dev/shm", marker).unlink()
