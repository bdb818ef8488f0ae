"""Package-install egress (issue 25): pip inside a real bwrap sandbox, through the real executor,
installs from a local package index on loopback via the host's egress proxy; everything off the
allowlist is refused with a 403 text; bytes are metered per user (the socket a connection came in
on says whose); a second user's sandbox has its own socket and meter; the user's venv survives a
sandbox restart. No internet: the index is a PEP 503 folder served on 127.0.0.2 (a loopback
address that is not the sandbox's own 127.0.0.1, so NO_PROXY does not apply to it)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.executor_stack import Stack

INDEX_HOST = "127.0.0.2"
WHEEL = "zcbot_tiny-0.1-py3-none-any.whl"


def build_wheel(folder: Path) -> Path:
    """A minimal valid wheel (one module), made here: no build backend, no network."""
    files = {
        "zcbot_tiny/__init__.py": b'VALUE = "tiny-ok"\n',
        "zcbot_tiny-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: zcbot-tiny\nVersion: 0.1\n",
        "zcbot_tiny-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("zcbot_tiny-0.1.dist-info/RECORD,,")
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("zcbot_tiny-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def serve(folder: Path) -> http.server.ThreadingHTTPServer:
    handler = lambda *a, **kw: _Quiet(*a, directory=str(folder), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer((INDEX_HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """(port of the package index, port of another loopback server that is NOT on the allowlist)."""
    root = tmp_path / "index"
    (root / "simple" / "zcbot-tiny").mkdir(parents=True)
    (root / "packages").mkdir()
    wheel = build_wheel(root / "packages")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "index.html").write_text('<a href="zcbot-tiny/">zcbot-tiny</a>\n')
    (root / "simple" / "zcbot-tiny" / "index.html").write_text(
        f'<a href="../../packages/{WHEEL}#sha256={sha}">{WHEEL}</a>\n')
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("not-for-sandboxes")
    servers = [serve(root), serve(other)]
    try:
        yield servers[0].server_port, servers[1].server_port
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def audit(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def egress_stack(stack: Stack, port: int, backend: str = "bwrap") -> Path:
    log = stack.root / "egress-audit.jsonl"
    await stack.executor("h1", egress_allow=(f"{INDEX_HOST}:{port}",), egress_audit_log=log,
                         pip_index_url=f"http://{INDEX_HOST}:{port}/simple/", backend=backend)
    return log


def _docker_image_ready() -> bool:
    from zcbot_executor.config import ExecutorConfig
    from zcbot_executor.sandbox.docker import docker_client, engine_available

    if not engine_available():
        return False
    try:
        docker_client(timeout=10).images.get(ExecutorConfig.defaults().docker_image)
        return True
    except Exception:
        return False


FETCH = ("python - <<'EOF'\n"
         "import urllib.request, urllib.error\n"
         "for url in {urls!r}:\n"
         "    try:\n"
         "        body = urllib.request.urlopen(url, timeout=20).read().decode()\n"
         "        print('GOT', url, body[:60].replace(chr(10), ' '))\n"
         "    except urllib.error.HTTPError as exc:\n"
         "        print('HTTP', exc.code, url, exc.read().decode()[:160].replace(chr(10), ' '))\n"
         "    except OSError as exc:\n"
         "        print('ERR', url, exc)\n"
         "EOF")


async def test_pip_install_through_the_proxy_into_the_user_venv(stack: Stack, index: tuple[int, int]) -> None:
    port, _ = index
    log = await egress_stack(stack, port)
    # the sandbox has no network of its own: the index is unreachable without the proxy
    r = await stack.shell(f"python -c \"import socket; socket.create_connection(('{INDEX_HOST}', {port}), timeout=3)\" "
                          "2>&1 | tail -1; echo $VIRTUAL_ENV; command -v python pip")
    assert "Network is unreachable" in r.output or "Errno" in r.output, r.output
    assert "/workspace/.venv\n/workspace/.venv/bin/python\n/workspace/.venv/bin/pip" in r.output, r.output
    r = await stack.shell("pip install --no-cache-dir zcbot-tiny 2>&1 | tail -3; "
                          "python -c 'import zcbot_tiny, sys; print(zcbot_tiny.VALUE, sys.prefix)'", timeout=120)
    assert "tiny-ok /workspace/.venv" in r.output, r.output
    installed = stack.storage / "u1" / ".venv" / "lib"
    assert list(installed.glob("python3*/site-packages/zcbot_tiny/__init__.py")), "not installed in <user_root>/.venv"
    # run_python uses the user's venv too
    r = await stack.call("run_python", {"code": "import zcbot_tiny; print(zcbot_tiny.VALUE)"})
    assert r.ok and "tiny-ok" in r.output, (r.output, r.error)

    lines = [e for e in audit(log) if e["user"] == "u1" and e["allowed"]]
    assert lines and all(e["host"] == INDEX_HOST and e["port"] == port for e in lines), audit(log)
    wheel_size = (stack.root / "index" / "packages" / WHEEL).stat().st_size
    assert sum(e["bytes_down"] for e in lines) > wheel_size
    hub = stack.services[0][0].backend.egress
    assert hub.usage["u1"].bytes_down == sum(e["bytes_down"] for e in audit(log) if e["user"] == "u1")

    # a restarted sandbox keeps the venv and what was installed in it
    await stack.services[0][0].pool.discard("u1")
    r = await stack.shell("python -c 'import zcbot_tiny; print(zcbot_tiny.VALUE)'")
    assert "tiny-ok" in r.output, r.output


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
async def test_off_allowlist_refused_and_users_metered_apart(stack: Stack, index: tuple[int, int], backend: str) -> None:
    """The same bridge in both backends (docker: the socket bind-mounted, the forwarder as the
    container's main process); docker needs a real engine with the sandbox image."""
    if backend == "docker" and not await asyncio.to_thread(_docker_image_ready):
        pytest.skip("no Docker engine with the sandbox image (deploy/sandbox/local-engine.sh)")
    port, other_port = index
    log = await egress_stack(stack, port, backend)
    urls = ["http://blocked.example/x", "https://blocked.example/x", f"http://{INDEX_HOST}:{other_port}/secret.txt",
            "http://169.254.169.254/latest/meta-data/", f"http://{INDEX_HOST}:{port}/simple/"]
    r = await stack.shell(FETCH.format(urls=urls), timeout=60)
    out = r.output
    assert "HTTP 403 http://blocked.example/x zcbot egress proxy: refused: blocked.example:80 is not on the egress allowlist" in out, out
    assert "ERR https://blocked.example/x <urlopen error Tunnel connection failed: 403 Forbidden>" in out, out
    assert f"HTTP 403 http://{INDEX_HOST}:{other_port}/secret.txt" in out and "not-for-sandboxes" not in out, out
    assert "HTTP 403 http://169.254.169.254/" in out, out
    assert f"GOT http://{INDEX_HOST}:{port}/simple/" in out, out
    u1 = [e for e in audit(log) if e["user"] == "u1"]
    refused = {(e["host"], e["port"]) for e in u1 if not e["allowed"]}
    assert {("blocked.example", 80), ("blocked.example", 443), (INDEX_HOST, other_port), ("169.254.169.254", 80)} <= refused

    # a second user's sandbox: its own socket, its own meter; the first user's socket is not there
    hub = stack.services[0][0].backend.egress
    u1_socket = await hub.socket_for("u1")
    before = hub.usage["u1"].total
    r = await stack.shell(f"ls /run/zcbot; test -e {u1_socket} && echo SEES-U1; command -v python; "
                          + FETCH.format(urls=urls[-1:]), user="u2")
    assert r.output.startswith("egress.sock\n") and "SEES-U1" not in r.output, r.output
    assert "\n/workspace/.venv/bin/python\n" in r.output, r.output  # u2's own venv, made on first use
    assert f"GOT http://{INDEX_HOST}:{port}/simple/" in r.output, r.output
    assert await hub.socket_for("u2") != u1_socket
    assert hub.usage["u1"].total == before  # u2's traffic is not on u1's meter
    u2 = [e for e in audit(log) if e["user"] == "u2"]
    assert u2 and all(e["allowed"] and e["bytes"] > 0 for e in u2), u2
    assert hub.usage["u2"].total == sum(e["bytes"] for e in u2)


# ---- the allowlist itself (no sandbox) ----------------------------------------------------------

def test_allowlist_entries_and_decisions() -> None:
    from zcbot_executor.egress.allowlist import Allowlist, parse_entry

    for bad in ("a b", "*", "a/b", "x:99999", "*.", "a..b", "http://pypi.org"):
        with pytest.raises(ValueError):
            parse_entry(bad)
    answers = {"pypi.org": ["151.101.0.223"], "files.example.org": ["151.101.1.1"], "rebind.example.org": ["151.101.1.2", "10.0.0.7"],
               "meta.example.org": ["169.254.169.254"], "cgnat.example.org": ["100.64.1.1"], "mapped.example.org": ["::ffff:127.0.0.1"]}
    allow = Allowlist(["pypi.org", "*.example.org", "127.0.0.2:9000", "[::1]:8080"], resolver=lambda h, p: answers[h])
    assert allow.decide("PyPI.org.", 443).address == "151.101.0.223"
    assert not allow.decide("pypi.org", 22).allowed  # names default to 443 and 80 only
    assert allow.decide("files.example.org", 80).allowed and not allow.decide("example.org", 443).allowed
    for name in ("rebind.example.org", "meta.example.org", "cgnat.example.org", "mapped.example.org"):
        decision = allow.decide(name, 443)  # allowlisted, but some address is not public: refused
        assert not decision.allowed and "non-public" in decision.reason, (name, decision)
    assert allow.decide("127.0.0.2", 9000).address == "127.0.0.2"  # an IP literal entry: exactly that
    assert not allow.decide("127.0.0.2", 9001).allowed and not allow.decide("127.0.0.1", 9000).allowed
    assert allow.decide("[::1]", 8080).allowed and not allow.decide("evil.example.com", 443).allowed


def test_default_allowlist_has_github_and_mirrors_each_explained() -> None:
    """Seed 003 §7.5 #2: "pypi/github/npm + mirrors" by default, so `git clone https://github.com/...`
    and release downloads work without configuration (issue 40)."""
    from zcbot_executor.config import DEFAULT_EGRESS_ALLOW, DEFAULT_EGRESS_HOSTS, ExecutorSettings
    from zcbot_executor.egress.allowlist import Allowlist, parse_entry

    hosts = [h for h, _why in DEFAULT_EGRESS_HOSTS]
    for needed in ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "github.com", "codeload.github.com",
                   "objects.githubusercontent.com", "raw.githubusercontent.com", "pypi.tuna.tsinghua.edu.cn",
                   "registry.npmmirror.com"):
        assert needed in hosts, needed
    assert len(set(hosts)) == len(hosts) and all(len(why) > 10 for _h, why in DEFAULT_EGRESS_HOSTS)
    for host in hosts:
        parse_entry(host)
    assert ExecutorSettings().zcbot_egress_allow == DEFAULT_EGRESS_ALLOW == ",".join(hosts)
    allow = Allowlist(hosts, resolver=lambda h, p: ["140.82.112.3"])
    assert allow.decide("github.com", 443).allowed and allow.decide("codeload.github.com", 443).allowed
    assert not allow.decide("gist.github.com", 443).allowed  # names, not their subdomains
    assert not allow.decide("github.com", 22).allowed  # https only (and 80): no git over ssh
