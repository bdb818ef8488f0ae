"""The sandbox's end of the egress bridge (stdlib only; staged beside `tool_runner.py`,
run by the sandbox's python as the sandbox user: see inside/__init__.py).

A sandbox has no network but its own loopback. The executor binds one unix socket into it (its
user's socket of the host-side egress proxy); this forwarder listens on 127.0.0.1:PORT inside the
sandbox's network namespace and pipes every connection to that socket, so `HTTP(S)_PROXY=
http://127.0.0.1:PORT` works for pip and npm (the same shape as Claude Code's sandbox runtime on
bubblewrap). It decides nothing: the host side identifies the user by the socket and applies the
allowlist. bwrap: a thread of the warm runner (and of a background process's wrapper); docker:
the container's main process (`python egress_forward.py SOCKET PORT`).
"""

import _thread
import socket
import sys

CHUNK = 65536


def _pipe(src, dst) -> None:
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _handle(client, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        client.close()
        upstream.close()
        return
    done = _thread.allocate_lock()
    done.acquire()

    def up() -> None:
        _pipe(client, upstream)
        done.release()

    _thread.start_new_thread(up, ())
    _pipe(upstream, client)
    done.acquire()
    client.close()
    upstream.close()


def listen(port: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    return server


def serve(server: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _addr = server.accept()
        except OSError:
            continue
        _thread.start_new_thread(_handle, (client, socket_path))


def start(socket_path: str, port: int) -> bool:
    """Listen now (so the first tool call finds the port open) and serve in a thread."""
    try:
        server = listen(port)
    except OSError as exc:
        sys.stderr.write(f"zcbot: egress forwarder could not listen on 127.0.0.1:{port}: {exc}\n")
        return False
    _thread.start_new_thread(serve, (server, socket_path))
    return True


if __name__ == "__main__":  # docker: the container's main process, which must not exit (the container would stop)
    try:
        serve(listen(int(sys.argv[2])), sys.argv[1])
    except OSError as exc:
        sys.stderr.write(f"zcbot: egress forwarder could not listen: {exc}; the sandbox has no egress\n")
        import time

        while True:
            time.sleep(3600)
