"""The `wechat_push` host tool: the agent proactively messages its user on WeChat/WeCom.

Registered by the runner only when the user has an active channel binding
(`await user_has_channel(rt.autocommit, user_id)` before building the toolbox). Runs on the host:
it sends a push request over NATS; no credential is visible to the model or the sandbox.
`file_path` is relative to the task folder (or to the user root when it starts with `/workspace/`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS

from zcbot_core.bus import Topology
from zcbot_core.channels.bindings import user_has_channel
from zcbot_core.channels.push import send_to_user
from zcbot_core.safe_fs import paths
from zcbot_core.tools.results import ToolOutcome, required_text

__all__ = ["PUSH_TOOL_SCHEMA", "register_push_tool", "user_has_channel"]

MAX_TEXT = 4000

PUSH_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "wechat_push",
        "description": (
            "Send a message (and optionally one file) to the user on their linked WeChat/WeCom right now. "
            "Use it for proactive notifications (e.g. a long job finished, a scheduled brief), not to answer "
            "the current conversation. Personal WeChat only accepts pushes within ~24 h of the user's last "
            "message there; the result says which channels got it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The message text (plain text)."},
                "file_path": {"type": "string",
                              "description": "Optional file to attach, relative to the task folder."},
                "channel": {"type": "string", "enum": ["wecom", "ilink"],
                            "description": "Only this channel (default: every linked channel)."},
            },
            "required": ["text"],
        },
    },
}


def _user_relative(cwd: str, file_path: str) -> str:
    """The file's path relative to the user root, given the task folder `cwd` (both user-relative)."""
    raw = file_path.strip()
    if raw.startswith("/workspace/"):
        rel = raw[len("/workspace/"):]
    elif raw.startswith("/"):
        raise paths.PathRejected("file_path must be relative to the task folder")
    else:
        rel = posixpath.join(cwd or "", raw)
    return paths.normalize_rel(rel, allow_empty=False)


@dataclass
class PushHostTool:
    """Same shape as the runner's `HostTool` (schema + async handler); core does not import services."""

    schema: dict[str, Any]
    handler: Callable[[dict[str, Any]], Awaitable[ToolOutcome]]


def register_push_tool(toolbox: Any, nc: NATS, topo: Topology, user_id: str) -> None:
    """Add `wechat_push` to a `RunnerToolBox` (the caller has checked `user_has_channel`)."""
    cwd = getattr(toolbox, "cwd", "") or ""

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        text = required_text(args, "text", MAX_TEXT, "a non-empty string", "; send a file for longer content")
        if isinstance(text, ToolOutcome):
            return text
        channel = args.get("channel")
        if channel not in (None, "", "wecom", "ilink"):
            return ToolOutcome.failure("`channel` must be 'wecom' or 'ilink' (or omitted for every linked channel)")
        file_rel = None
        if args.get("file_path"):
            try:
                file_rel = _user_relative(cwd, str(args["file_path"]))
            except paths.PathRejected as exc:
                return ToolOutcome.failure(str(exc))
        reply = await send_to_user(nc, topo, user_id, text, file_path=file_rel, channel=channel or None)
        errors = "; ".join(f"{name}: {msg}" for name, msg in reply.errors.items())
        if reply.delivered:
            note = f" (not delivered — {errors})" if errors else ""
            return ToolOutcome.make(True, f"delivered to {', '.join(reply.delivered)}{note}")
        return ToolOutcome.failure(f"not delivered: {errors or 'no linked channel'}")

    toolbox.add_host_tool(PushHostTool(schema=PUSH_TOOL_SCHEMA, handler=handler))
