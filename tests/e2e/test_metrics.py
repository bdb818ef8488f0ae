"""Every service, run as its own process, serves /healthz, /readyz and Prometheus /metrics with the
names operators alert on (issue 10); counters move when a run goes through."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import httpx

from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from zcbot_devstack.services import SERVICE_PORT_ENV
from zcbot_fakellm import FakeLLM

EXPECTED = {
    "gateway": ["zcbot_sse_active_streams"],
    "runner": ["zcbot_runs_started_total", "zcbot_runs_finished_total", "zcbot_run_queue_wait_seconds",
               "zcbot_run_ttft_seconds", "zcbot_tool_rpc_seconds", "zcbot_runner_active_runs"],
    "executor": ["zcbot_tool_calls_total", "zcbot_tool_call_seconds", "zcbot_executor_sandboxes"],
    "scheduler": ["zcbot_schedule"],
    "channels": ["process_cpu_seconds_total"],
}


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_services_expose_health_and_metrics(settings_env: dict[str, str], start_service, tmp_path: Path,
                                                  fake_llm: FakeLLM) -> None:
    models = tmp_path / "models"
    write_fake_profile(models, fake_llm.base_url)
    env = {"ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake"}
    procs = {name: start_service(name, env, wait=False) for name in SERVICE_PORT_ENV}
    for proc in procs.values():
        await proc.wait_healthy_async(timeout=90)
    ports = {name: int(settings_env[key]) for name, key in SERVICE_PORT_ENV.items()}
    for name, port in ports.items():
        assert scrape(port, "/healthz")[0] == 200, name
        # /healthz answers while start-up goes on; /readyz is 503 until the service can take work
        # (the runner warms LiteLLM and binds its consumer first), then 200 for good.
        deadline = asyncio.get_running_loop().time() + 60
        while (ready := await asyncio.to_thread(scrape, port, "/readyz"))[0] == 503:
            assert '"ready":false' in ready[1].replace(" ", ""), (name, ready)
            assert asyncio.get_running_loop().time() < deadline, (name, ready)
            await asyncio.sleep(0.1)
        status, body = ready
        assert status == 200 and '"ready":true' in body.replace(" ", ""), (name, body)

    fake_llm.script("KEY-metrics", [{"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}}]},
                                    {"text": "done"}])
    base = f"http://127.0.0.1:{ports['gateway']}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        token = (await c.post("/v1/auth/login", json={"user_id": "metrics",
                                                       "platform_key": settings_env["PLATFORM_KEY"]})).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        task = (await c.post("/v1/tasks", json={"name": "Metrics"}, headers=headers)).json()
        body = (await c.post(f"/v1/tasks/{task['task_id']}/messages", json={"content": "KEY-metrics go"},
                             headers=headers)).json()
        async with c.stream("GET", body["events_url"], headers=headers) as r:
            async for line in r.aiter_lines():
                if line.startswith("event: done"):
                    break
    await asyncio.sleep(0.2)
    for name, names in EXPECTED.items():
        status, text = scrape(ports[name], "/metrics")
        assert status == 200, name
        for metric in names:
            assert metric in text, (name, metric)
    runner = scrape(ports["runner"], "/metrics")[1]
    assert 'zcbot_runs_finished_total{status="ok"} 1.0' in runner
    assert 'zcbot_tool_rpc_seconds_count{tool="shell"} 1.0' in runner
    executor = scrape(ports["executor"], "/metrics")[1]
    assert 'tool="shell"' in executor
