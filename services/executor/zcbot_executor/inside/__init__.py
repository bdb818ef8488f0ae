"""The programs that run inside a user's sandbox, not in the executor (stdlib only).

Who runs them: never the executor's interpreter or identity. `sandbox/policy.stage_runner` copies
the files of this folder (`policy.RUNNER_FILES`) to a content-addressed folder of the executor's
state, mounted read-only at `/opt/zcbot` in every sandbox; there they import each other by plain
name (`import tools_fs`), never as this package, and nothing of `zcbot_core` is importable.
- Interpreter: bwrap and unsafe backends: ZCBOT_SANDBOX_PYTHON (default the executor's own
  `sys.executable`), started as `python -I -S -B -c "…import sandbox_init; sandbox_init.early(uid,
  gid); import tool_runner…"` (`policy.runner_command`: no user-writable folder on `sys.path`);
  docker backend: the sandbox image's `/usr/local/bin/python3` through `docker exec`.
- Identity: bwrap under a root executor — host root with only CAP_SETUID/CAP_SETGID until
  `sandbox_init.early`, the first statement, drops to ZCBOT_SANDBOX_UID/GID (10001), then
  `sandbox_init.enter_userns` maps that uid to 1000 in a user namespace of its own with no
  capabilities; bwrap under a non-root executor — uid 1000 in bwrap's user namespace (the
  executor's uid outside); docker — the container user ZCBOT_SANDBOX_UID:GID; unsafe — the
  executor's own user (development only).
In a Docker sandbox `confine.py` runs first (the container's main process and each `docker exec`
load the bwrap backend's seccomp filter and a Landlock domain before anything else). The entry is `tool_runner.py` (modes serve, once, kill, proc: the background wrapper
`proc_wrapper.py`); the host imports these modules only in tests.
"""
