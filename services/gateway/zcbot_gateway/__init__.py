"""zcbot gateway: the HTTP face of zcbot (FastAPI, `/v1` REST + SSE).

Thin by design: `app.create_app(settings)` wires the shared runtime (NATS + Postgres, see
`zcbot_core.platform.service`), error handlers (`errors`), request dependencies (`deps`) and the routers
under `routes/`. `main.main()` runs it under uvicorn. Task JSON lives in `schemas.task_to_json`.
"""
