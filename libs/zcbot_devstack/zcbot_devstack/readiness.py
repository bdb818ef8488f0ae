"""Is a service of THIS `zcbot up` ready to take work? Its `/readyz` must answer 200 (a service
answers 503 until its start-up has finished) with the instance id the stack gave it: another
program on the same port, or a leftover zcbot of another stack, is never taken for ours."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

FOREIGN = "foreign"  # something answers on the port, but not our service


def health_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)


def readiness(host: str, port: int, instance: str, timeout: float = 1.0) -> str:
    """"ready", "starting" (ours, or nothing yet, not ready) or FOREIGN (answers with another id)."""
    netloc = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"http://{netloc}:{port}/readyz", timeout=timeout) as resp:
            status, raw = resp.status, resp.read(65536)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(65536)
    except (OSError, ValueError):
        return "starting"
    try:
        body = json.loads(raw)
    except ValueError:
        return FOREIGN
    if not isinstance(body, dict) or body.get("instance") != instance:
        return FOREIGN
    return "ready" if status == 200 and body.get("ready") is True else "starting"
