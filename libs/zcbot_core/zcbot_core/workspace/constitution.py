"""Task "constitution" files (seed 003 §7.9): the name rule and the prompt paragraph that states it.

Several tasks can share a folder, so the documents binding one task (confirmed spec, requirements,
outline) carry the task's short id in their name. Skills and the system prompt share this rule.
"""

from __future__ import annotations

import re
from datetime import date


def short_id(task_id: str) -> str:
    """The stable 8-hex anchor of a task (its id without dashes, first 8 characters)."""
    return task_id.replace("-", "").lower()[:8]


def _slug(name: str) -> str:
    slug = re.sub(r"[\s/\\:*?\"<>|]+", "-", name.strip()).strip("-.")
    return slug[:60] or "task"


def constitution_filename(task_id: str, task_name: str, base: str = "spec", day: date | None = None) -> str:
    """`<date>-<short_id>-<name>.<base>.md`; the current one is the greatest name matching
    `*-<short_id>-*.<base>.md` (dates sort), a re-scoped spec is a new dated file."""
    return f"{(day or date.today()).isoformat()}-{short_id(task_id)}-{_slug(task_name)}.{base}.md"


def constitution_block(task_id: str, task_name: str, day: date | None = None) -> str:
    """Prompt paragraph telling the agent how this task's constitution files are named."""
    sid = short_id(task_id)
    example = constitution_filename(task_id, task_name, "spec", day)
    return (
        "## This task's constitution files\n"
        "Several tasks can share this folder, so the documents that bind only this task (the confirmed "
        "spec, requirements, outline) carry this task's id in their file name: "
        f"`<date>-{sid}-<name>.<kind>.md`, for example `{example}`. The current one of a kind is the "
        f"file matching `*-{sid}-*.<kind>.md` whose name sorts last. When the user changes direction, "
        "write a new file with today's date (the older one stays as history); never rename these files, "
        "and leave other tasks' files alone. Shared material (sources, sections, figures) is not a "
        "constitution file and keeps ordinary names."
    )
