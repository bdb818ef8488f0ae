"""JSON schemas (OpenAI function format) of the sandbox tools, which run on an executor (DESIGN §5).

Paths are relative to the task folder (the working directory) or absolute under `/workspace`
(the user's root); anything outside `/workspace` is refused.
"""

from __future__ import annotations

from typing import Any

DEFAULT_TIMEOUTS: dict[str, float] = {"shell": 60.0, "run_python": 120.0}
FS_TIMEOUT = 30.0
MAX_FOREGROUND_TIMEOUT = 600.0
DEFAULT_BACKGROUND_LIMIT = 7200.0
MAX_BACKGROUND_LIMIT = 86400.0


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
        },
    }


_PATH = {"type": "string", "description": "File path, relative to the task folder or absolute under /workspace."}
_BACKGROUND = {
    "type": "boolean",
    "description": (
        "Run detached in the background (for work expected to take more than about a minute). Returns a proc_id "
        "at once; follow it with check_process. Default false."
    ),
}
_KEEP = {
    "type": "boolean",
    "description": (
        "With background=true: keep the process running when this run is cancelled or the task is deleted "
        "(only when the user asked for that; its time limit still applies). Default false: it is killed then."
    ),
}

SANDBOX_TOOL_SCHEMAS: list[dict[str, Any]] = [
    _fn(
        "read",
        "Read a text file. Returns numbered lines (line number, tab, text). Long files are paged: use offset "
        "and limit to read further. Binary files are refused (use run_python for them).",
        {
            "path": _PATH,
            "offset": {"type": "integer", "description": "First line to return (1-based). Default 1.", "minimum": 1},
            "limit": {"type": "integer", "description": "Maximum number of lines. Default 2000.", "minimum": 1},
        },
        ["path"],
    ),
    _fn(
        "write",
        "Create or overwrite a text file with the given content (parent folders are created). The write is atomic: "
        "readers never see a partial file.",
        {"path": _PATH, "content": {"type": "string", "description": "The complete new file content."}},
        ["path", "content"],
    ),
    _fn(
        "edit",
        "Replace one exact occurrence of old_str with new_str in a text file. old_str must match exactly once "
        "(whitespace included); if it matches 0 or several times nothing is changed and the error says how many. "
        "Set replace_all to replace every occurrence.",
        {
            "path": _PATH,
            "old_str": {"type": "string", "description": "Exact text to replace (copy it from read output, without line numbers)."},
            "new_str": {"type": "string", "description": "Replacement text."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one. Default false."},
        },
        ["path", "old_str", "new_str"],
    ),
    _fn(
        "glob",
        "List files and folders matching a glob pattern, e.g. '*.md', '**/*.py', 'slides/*.{png,jpg}'. '**' "
        "matches any number of folders. Paths are shown relative to the task folder.",
        {
            "pattern": {"type": "string", "description": "Glob pattern, relative to path (or absolute under /workspace)."},
            "path": {"type": "string", "description": "Folder to search in. Default: the task folder."},
        },
        ["pattern"],
    ),
    _fn(
        "grep",
        "Search file contents with a regular expression (Python syntax). Prints path:line: text for each matching "
        "line; binary and very large files are skipped; the output is capped.",
        {
            "pattern": {"type": "string", "description": "Regular expression."},
            "path": {"type": "string", "description": "File or folder to search. Default: the task folder."},
            "glob": {"type": "string", "description": "Only search files whose name matches this glob, e.g. '*.py'."},
            "case_insensitive": {"type": "boolean", "description": "Ignore case. Default false."},
        },
        ["pattern"],
    ),
    _fn(
        "shell",
        "Run a bash command in the task folder inside the sandbox (no network). Returns stdout and stderr combined. "
        "Times out after 60 s by default; every process the command started is killed when it ends. For longer "
        "jobs use background=true.",
        {
            "command": {"type": "string", "description": "The bash command line."},
            "timeout": {"type": "number", "description": f"Seconds before the command is killed (default 60, max {MAX_FOREGROUND_TIMEOUT:g}; with background=true: the time limit, default {DEFAULT_BACKGROUND_LIMIT:g})."},
            "background": _BACKGROUND,
            "keep": _KEEP,
        },
        ["command"],
    ),
    _fn(
        "run_python",
        "Run Python code (saved to a temporary file) in the task folder inside the sandbox, with python-pptx and "
        "python-docx available and no network. Print what you need to see. Times out after 120 s by default; "
        "use background=true for longer work.",
        {
            "code": {"type": "string", "description": "The Python source to run."},
            "timeout": {"type": "number", "description": f"Seconds before it is killed (default 120, max {MAX_FOREGROUND_TIMEOUT:g}; with background=true: the time limit, default {DEFAULT_BACKGROUND_LIMIT:g})."},
            "background": _BACKGROUND,
            "keep": _KEEP,
        },
        ["code"],
    ),
    _fn(
        "check_process",
        "Check on a background process started with background=true: its status (running, exited, killed, "
        "timed out, lost), exit code and the tail of its output; or kill it.",
        {
            "proc_id": {"type": "string", "description": "The proc_id returned when the process was started."},
            "action": {"type": "string", "enum": ["status", "kill"], "description": "Default status."},
            "tail_lines": {"type": "integer", "description": "How many last output lines to show. Default 50.", "minimum": 0},
        },
        ["proc_id"],
    ),
]

SANDBOX_TOOL_NAMES: frozenset[str] = frozenset(s["function"]["name"] for s in SANDBOX_TOOL_SCHEMAS)


def effective_timeout(tool: str, args: dict[str, Any], requested: float | None) -> float:
    """Foreground time limit of a call: the request's own if set, else the tool's default.

    The runner fills `ToolCallRequest.timeout` (from args.timeout, capped); callers that leave it at
    0 get `args.timeout` or the default. Background starts and check_process return at once, so
    they get the fs budget.
    """
    if tool in DEFAULT_TIMEOUTS and args.get("background"):
        return FS_TIMEOUT
    if requested and requested > 0:
        return float(min(requested, MAX_FOREGROUND_TIMEOUT))
    value = args.get("timeout")
    if tool in DEFAULT_TIMEOUTS and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(min(value, MAX_FOREGROUND_TIMEOUT))
    return DEFAULT_TIMEOUTS.get(tool, FS_TIMEOUT)
