"""The executor service: runs sandbox tools for users on a sandbox host (DESIGN §5).

Layout: `main` (entrypoint) -> `service` (NATS micro service, dispatch, drain) with `leases`
(per-user affinity), `procs` (background processes), `sandbox/` (backends: bwrap, docker, unsafe)
and the stdlib-only files that run inside a sandbox (`tool_runner`, `tools_fs`, `tools_exec`,
`proc_wrapper`, `sandbox_init`).
"""
