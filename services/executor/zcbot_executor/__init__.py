"""The executor service: runs sandbox tools for users on a sandbox host (DESIGN §5).

Host side: `main` (entrypoint) -> `service` (NATS micro service, dispatch, cancel, drain) with
`leases` (per-user affinity in KV), `background/` (background processes: start, check, kill, list,
sweep; their time limits and kills from outside; the web's process cards; the disk quota's
enforcement), `file_watch` (a call's file changes), `replies` (16K/preview shaping), `metrics`,
`config`, `egress/` (package-install egress) and `sandbox/` (backends bwrap, docker, unsafe behind
`sandbox.base`; `policy` = env allowlist, staged runner files, safe file access in user roots).

Sandbox side, `inside/` (stdlib only, staged read-only at /opt/zcbot, run by the sandbox's python as
the sandbox user): `tool_runner` (warm/single-shot runner and background wrapper entry), `tools_fs`
(read/write/edit + path rules), `tools_search` (glob/grep), `tools_exec` (shell/run_python process
groups), `proc_wrapper`, `sandbox_init` (privilege drop, rlimits), `wire` (JSON without heavy
imports), `egress_forward`, `user_venv`.
"""
