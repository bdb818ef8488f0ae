"""A stand-in for a zcbot service process, for tests of process plumbing (`zcbot up`, ServiceProcess).

`python standin_service.py NAME PORT_ENV` serves GET /healthz and /readyz on the port in env var PORT_ENV (callers
pass the registry's, `zcbot_devstack.services.SERVICE_PORT_ENV`), prints one JSON log line, spawns a
grandchild `sleep` in its process group (so tests can check nothing is orphaned) and exits on
SIGTERM. With STANDIN_DIR set it writes NAME.env.json (the zcbot env it saw) and appends
"pid grandchild_pid" to NAME.pids there; with STANDIN_CRASH_ONCE=NAME it exits 3 on its first run; with STANDIN_FOREIGN=NAME its
/readyz answers with an instance id that is not the stack's (another program on the port); with
STANDIN_EXIT_AFTER=NAME:SECONDS it exits 4 that long after every start.
It imports nothing from zcbot, so it starts in milliseconds.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORDED = ("ZCBOT_DB_URL", "ZCBOT_NATS_URL", "ZCBOT_HOME", "JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY")


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        ok = self.path in ("/healthz", "/readyz")
        # The instance id `zcbot up` gave it, as the real services answer (zcbot_core.platform.service).
        # STANDIN_FOREIGN=NAME: that one answers as another program would (another instance id).
        foreign = os.environ.get("STANDIN_FOREIGN") == sys.argv[1]
        instance = "someone-else" if foreign else os.environ.get("ZCBOT_INSTANCE_ID", "")
        answer = {"status": "ok", "ready": True, "instance": instance}
        body = json.dumps(answer).encode() if ok else b"{}"
        self.send_response(200 if ok else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    name, port_env = sys.argv[1], sys.argv[2]
    port = int(os.environ[port_env])
    state = os.environ.get("STANDIN_DIR")
    if state:
        with open(os.path.join(state, f"{name}.env.json"), "w") as fh:
            json.dump({k: os.environ.get(k) for k in (*RECORDED, port_env)}, fh)
        marker = os.path.join(state, f"{name}.crashed")
        if os.environ.get("STANDIN_CRASH_ONCE") == name and not os.path.exists(marker):
            open(marker, "w").close()
            print("crashing on purpose", flush=True)
            sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if state:
        with open(os.path.join(state, f"{name}.pids"), "a") as fh:
            fh.write(f"{os.getpid()} {child.pid}\n")
    server = ThreadingHTTPServer(("127.0.0.1", port), _Health)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    line = {"ts": time.time(), "level": "info", "service": name, "logger": "standin", "msg": "service started", "port": port}
    print(json.dumps(line), flush=True)
    exit_after = os.environ.get("STANDIN_EXIT_AFTER", "")  # NAME:SECONDS: exits 4 that long after each start
    if exit_after.partition(":")[0] == name:
        threading.Timer(float(exit_after.partition(":")[2]), lambda: os._exit(4)).start()
    server.serve_forever()
    print(json.dumps({"level": "info", "msg": "stopped"}), flush=True)


if __name__ == "__main__":
    main()
