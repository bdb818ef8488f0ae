"""`python -m zcbot_devstack.forkserver_main`: the fork server's process (forkserver.py).

Its own module because a forked child runs the service through the CLI, and the CLI reaches the
fork server through `stack`: keeping this entry apart keeps that an import chain, not a cycle.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from zcbot_devstack.cli import main as cli_main
from zcbot_devstack.forkserver import CTL_FD_ENV, PRELOAD_ENV, serve


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when services stop
    ctl = socket.socket(fileno=int(os.environ.pop(CTL_FD_ENV)))
    service = serve(ctl, [m for m in os.environ.pop(PRELOAD_ENV, "").split(",") if m])
    if service is None:
        return
    sys.argv = ["zcbot", service]
    cli_main([service])


if __name__ == "__main__":
    main()
