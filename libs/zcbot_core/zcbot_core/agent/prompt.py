"""The system prompt, rebuilt for every run so memory and skills changes apply at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@dataclass
class PromptContext:
    working_dir: str
    task_name: str
    skills_block: str = ""
    memory_block: str = ""
    extra: str = ""


def load_template(name: str = "system.md") -> str:
    return (PROMPTS_DIR / name).read_text(encoding="utf-8")


def build_system_prompt(ctx: PromptContext, template: str | None = None) -> str:
    body = (template or load_template()).format(
        working_dir=ctx.working_dir,
        task_name=ctx.task_name,
        today=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    )
    parts = [body.strip()]
    for block in (ctx.skills_block, ctx.memory_block, ctx.extra):
        if block.strip():
            parts.append(block.strip())
    return "\n\n".join(parts)
