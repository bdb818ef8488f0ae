"""Host-side skill tools (seed 003 §3.5, §7.5 #6): load_skill, read_skill_file, save_skill, fork_skill.

They run in the runner, not in the sandbox: loading is a lookup in the registry, and authoring
writes `<user_root>/.skills/<name>/` directly through `zcbot_core.safe_fs` (validated, atomic,
resolved beneath the user root's fd and never through a symlink), so it works the same whatever
sandbox backend the executor uses.

- `load_skill(name)`: the SKILL.md body plus the skill's files with their sandbox paths
  (`{{skill_dir}}` and `{{rendering_dir}}` in the body are replaced by the sandbox paths). When a
  built-in skill's frontmatter has `model: <profile>`, `on_model_switch(profile)` is called — the
  single place a skill switches the model (the runner swaps the profile for the rest of the run and
  persists it on the task). It may return False (or raise) to refuse, and the result then says the
  model stays. A user skill's `model:` is ignored, and the result says so.
- `read_skill_file(name, path)`: a reference (or script) of a skill, read on demand. References are
  read through this tool rather than the sandbox `read` tool, because the sandbox fs tools only
  reach `/workspace`, not the read-only skills mount.
- `save_skill(name, content, path?)`: writes the user's `.skills/<name>/SKILL.md` (validated
  frontmatter; the name must match) or a support file under references/, scripts/ or assets/.
- `fork_skill(name, new_name?)`: copies a built-in skill (all its files) into the user's `.skills`,
  as `new_name` when given (its frontmatter name is rewritten) — the user's copy then replaces the
  built-in of the same name for this user.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcbot_core import quota, safe_fs
from zcbot_core.safe_fs.paths import PathRejected, normalize_rel
from zcbot_core.tools.results import ToolOutcome
from zcbot_core.workspace.skills import (
    MAX_SKILL_BYTES,
    SKILL_FILE,
    SUPPORT_DIRS,
    USER_SKILLS_DIRNAME,
    Skill,
    SkillFileMissing,
    SkillFormatError,
    SkillRegistry,
    parse_skill_md,
    validate_skill_name,
)

ModelSwitch = Callable[[str], "Awaitable[bool | None] | bool | None"]
HostHandler = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]
MAX_FORK_FILES = 500
MAX_FORK_BYTES = 20 * 1024 * 1024


@dataclass
class SkillHostTool:
    """Same shape as the runner's `HostTool` (schema + async handler); kept here so zcbot_core
    does not import the runner."""

    schema: dict[str, Any]
    handler: HostHandler


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


SCHEMAS = {
    "load_skill": _schema(
        "load_skill",
        "Load a skill's full instructions (and the list of its reference files and scripts) by name. "
        "Call it before starting work that matches a skill's description.",
        {"name": {"type": "string", "description": "the skill name, as listed under Skills"}}, ["name"]),
    "read_skill_file": _schema(
        "read_skill_file",
        "Read one of a skill's files (e.g. references/outline_format.md) when its instructions point to it.",
        {"name": {"type": "string", "description": "the skill name"},
         "path": {"type": "string", "description": "path inside the skill folder, e.g. references/x.md"}}, ["name", "path"]),
    "save_skill": _schema(
        "save_skill",
        "Create or replace one of the user's own skills: `content` is the whole SKILL.md (YAML frontmatter "
        "with name and description, then the instructions). With `path`, saves a support file of that skill "
        "instead (under references/, scripts/ or assets/). Only when the user asks for a skill to be created or changed.",
        {"name": {"type": "string", "description": "skill name: lowercase letters, digits, '-' or '_'"},
         "content": {"type": "string", "description": "the file's full text"},
         "path": {"type": "string", "description": "optional: a support file path such as references/style.md (default SKILL.md)"}},
        ["name", "content"]),
    "fork_skill": _schema(
        "fork_skill",
        "Copy a built-in skill with all its files into the user's own skills so it can be changed with save_skill. "
        "Without new_name the copy keeps the name and replaces the built-in skill for this user.",
        {"name": {"type": "string", "description": "the built-in skill to copy"},
         "new_name": {"type": "string", "description": "optional name for the copy"}}, ["name"]),
}


# ---- filesystem helpers (the user's folder is written by sandboxed code: trust nothing) --------
# Every access goes through zcbot_core.safe_fs: resolved beneath the user root's fd, no symlink
# ever followed, so a folder swapped for a symlink mid-call only makes the call fail. What is
# created belongs to the user root's owner (the sandbox uid), as everything safe_fs creates there.

def _support_path(path: str) -> str:
    try:
        rel = normalize_rel(path, allow_empty=False, allow_hidden=False)
    except PathRejected as exc:
        raise SkillFormatError(str(exc)) from None
    if rel == SKILL_FILE:
        return rel
    if rel.split("/", 1)[0] not in SUPPORT_DIRS or "/" not in rel:
        raise SkillFormatError(f"path must be SKILL.md or lie under {', '.join(d + '/' for d in SUPPORT_DIRS)}")
    return rel


def _rename_frontmatter(text: str, new_name: str) -> str:
    head, sep, rest = text.partition("\n---")
    head = re.sub(r"(?m)^name:.*$", f"name: {new_name}", head, count=1)
    return head + sep + rest


# ---- the tools -------------------------------------------------------------------------------

class SkillTools:
    def __init__(self, registry: SkillRegistry, user_root: Path, on_model_switch: ModelSwitch | None = None,
                 ledger: quota.Ledger | None = None) -> None:
        self.registry = registry
        self.user_root = Path(user_root)
        self.on_model_switch = on_model_switch
        self.ledger = ledger  # the disk quota (None: not counted)

    def _reserve(self, nbytes: int) -> int:
        """Count a save against the user's disk quota first (quota.DiskQuotaExceeded: not saved); the
        bytes counted, to give back if the save fails after all."""
        if self.ledger is not None and nbytes > 0:
            self.ledger.reserve(self.user_root.name, nbytes, self.user_root)
            return nbytes
        return 0

    def _release(self, nbytes: int) -> None:
        if self.ledger is not None and nbytes > 0:
            self.ledger.reserve(self.user_root.name, -nbytes, self.user_root)

    @property
    def skills_root(self) -> Path:
        return self.user_root / USER_SKILLS_DIRNAME

    def _root(self) -> safe_fs.Root:
        return safe_fs.Root.open(self.user_root, create=True)

    def _unknown(self, name: str) -> ToolOutcome:
        names = ", ".join(s.name for s in self.registry.list()) or "(none)"
        return ToolOutcome.failure(f"there is no skill named {name!r}; available skills: {names}")

    def _fill(self, text: str, skill: Skill) -> str:
        return (text.replace("{{skill_dir}}", skill.sandbox_dir or str(skill.folder))
                    .replace("{{rendering_dir}}", self.registry.rendering_dir))

    async def load_skill(self, args: dict[str, Any]) -> ToolOutcome:
        name = str(args.get("name") or "").strip()
        skill = self.registry.get(name)
        if skill is None:
            await asyncio.to_thread(self.registry.reload)  # a skill saved moments ago
            skill = self.registry.get(name)
        if skill is None:
            return self._unknown(name)
        origin = {"builtin": "built-in"}.get(skill.source, "the user's own")
        if skill.overrides:
            origin += ", replacing the built-in skill of the same name"
        lines = [f"# Skill `{skill.name}` ({origin})"]
        if skill.sandbox_dir:
            ro = " (read-only)" if skill.source == "builtin" else ""
            lines.append(f"Folder in the sandbox{ro}: {skill.sandbox_dir}")
        files = await asyncio.to_thread(skill.files)
        if files:
            lines.append("Files (read references with `read_skill_file`; run scripts by their sandbox path):")
            for rel in files:
                shown = skill.sandbox_path(rel)
                lines.append(f"- {rel}" + (f"  ->  {shown}" if shown and rel.startswith("scripts/") else ""))
        lines.append(f"Document rendering (Markdown -> docx/pdf, office -> pdf): python {self.registry.rendering_dir}/render.py --help")
        requested = skill.meta.get("model")
        if skill.model:
            lines.append(await self._switch(skill.model))
        elif requested and skill.source == "user":
            lines.append("Note: this skill's `model:` line is ignored (only built-in skills choose a model).")
        lines.append("")
        lines.append(self._fill(skill.body, skill))
        return ToolOutcome.make(True, "\n".join(lines))

    async def _switch(self, profile: str) -> str:
        if self.on_model_switch is None:
            return f"Model: this skill prefers model profile `{profile}`, but switching is not available here; continuing with the current model."
        try:
            result = self.on_model_switch(profile)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001 - a failed switch degrades to the current model
            return f"Model: switching to `{profile}` failed ({exc}); continuing with the current model."
        if result is False:
            return (f"Model: this skill prefers `{profile}`; the model was not switched (it is already in use or not "
                    "available here), continuing with the current model.")
        return f"Model: switched to profile `{profile}` for the rest of this task (this skill works best with it)."

    async def read_skill_file(self, args: dict[str, Any]) -> ToolOutcome:
        name = str(args.get("name") or "").strip()
        skill = self.registry.get(name)
        if skill is None:
            return self._unknown(name)
        try:
            rel = _support_path(str(args.get("path") or ""))
            text = await asyncio.to_thread(skill.read, rel, 4 * MAX_SKILL_BYTES)
        except SkillFileMissing:
            files = ", ".join(await asyncio.to_thread(skill.files)) or "(none)"
            return ToolOutcome.failure(f"skill `{name}` has no file {args.get('path')!r}; its files: {files}")
        except SkillFormatError as exc:
            return ToolOutcome.failure(f"{args.get('path')!r}: {exc}")
        except OSError as exc:
            return ToolOutcome.failure(f"cannot read {args.get('path')!r}: {exc.strerror or exc}")
        return ToolOutcome.make(True, self._fill(text, skill))

    async def save_skill(self, args: dict[str, Any]) -> ToolOutcome:
        try:
            name = validate_skill_name(str(args.get("name") or ""))
            content = args.get("content")
            if not isinstance(content, str) or not content.strip():
                raise SkillFormatError("content must be the file's full text")
            if len(content.encode("utf-8")) > MAX_SKILL_BYTES:
                raise SkillFormatError(f"content is larger than {MAX_SKILL_BYTES // 1024} KB")
            rel = _support_path(str(args.get("path") or SKILL_FILE))
            if rel == SKILL_FILE:
                meta, _ = parse_skill_md(content)
                if meta["name"] != name:
                    raise SkillFormatError(f"the frontmatter says `name: {meta['name']}` but the skill is saved as {name!r}; make them equal")
            await asyncio.to_thread(self._write, name, rel, content)
        except (SkillFormatError, PathRejected, quota.DiskQuotaExceeded) as exc:
            return ToolOutcome.failure(f"skill not saved: {exc}")
        except OSError as exc:
            return ToolOutcome.failure(f"skill not saved: {exc.strerror or exc}")
        await asyncio.to_thread(self.registry.reload)
        skill = self.registry.get(name)
        note = ""
        if skill is not None and skill.overrides:
            note = f" It replaces the built-in `{name}` skill for this user."
        return ToolOutcome.make(True, f"saved {USER_SKILLS_DIRNAME}/{name}/{rel} (sandbox path /workspace/{USER_SKILLS_DIRNAME}/{name}/{rel}).{note}")

    def _write(self, name: str, rel: str, content: str) -> None:
        with self._root() as root:
            if rel != SKILL_FILE and not root.is_file(f"{USER_SKILLS_DIRNAME}/{name}/{SKILL_FILE}"):
                raise SkillFormatError(f"save {name}'s SKILL.md first (or fork a built-in skill), then its support files")
            data = content.encode("utf-8")
            old = root.lstat(f"{USER_SKILLS_DIRNAME}/{name}/{rel}")
            self._reserve(len(data) - (old.st_size if old is not None else 0))
            root.write_bytes(f"{USER_SKILLS_DIRNAME}/{name}/{rel}", data, mkdirs=True, durable=True)

    async def fork_skill(self, args: dict[str, Any]) -> ToolOutcome:
        try:
            name = str(args.get("name") or "").strip()
            new_name = validate_skill_name(str(args.get("new_name") or name))
            source = self.registry.builtin(name)
            if source is None:
                current = self.registry.get(name)
                if current is None:
                    return self._unknown(name)
                if new_name == name:
                    raise SkillFormatError(f"`{name}` is already the user's own skill; give new_name to copy it")
                source = current
            count = await asyncio.to_thread(self._copy, source, new_name)
        except (SkillFormatError, PathRejected, quota.DiskQuotaExceeded) as exc:
            return ToolOutcome.failure(f"skill not forked: {exc}")
        except OSError as exc:
            return ToolOutcome.failure(f"skill not forked: {exc.strerror or exc}")
        await asyncio.to_thread(self.registry.reload)
        skill = self.registry.get(new_name)
        note = " It now replaces the built-in skill for this user." if skill is not None and skill.overrides else ""
        return ToolOutcome.make(True, (
            f"forked `{name}` to {USER_SKILLS_DIRNAME}/{new_name} ({count} files; sandbox path "
            f"/workspace/{USER_SKILLS_DIRNAME}/{new_name}).{note} Change it with save_skill."))

    def _copy(self, source: Skill, new_name: str) -> int:
        """Stage the copy in a hidden folder of `.skills`, then rename it into place (never replacing)."""
        exists = f"{USER_SKILLS_DIRNAME}/{new_name} already exists; change it with save_skill or fork to another new_name"
        files = [SKILL_FILE, *source.files(limit=MAX_FORK_FILES + 1)]
        if len(files) > MAX_FORK_FILES:
            raise SkillFormatError("the skill is too large to copy")
        with self._root() as root:
            if root.exists(f"{USER_SKILLS_DIRNAME}/{new_name}"):
                raise SkillFormatError(exists)
            staging = f"{USER_SKILLS_DIRNAME}/.fork-{new_name}-{secrets.token_hex(4)}"
            reserved = 0
            try:
                root.makedirs(staging)
                total = 0
                for rel in files:
                    data = source.read(rel, MAX_FORK_BYTES).encode("utf-8") if rel == SKILL_FILE else self._raw(source, rel)
                    total += len(data)
                    if total > MAX_FORK_BYTES:
                        raise SkillFormatError("the skill is too large to copy")
                    if rel == SKILL_FILE and new_name != source.name:
                        data = _rename_frontmatter(data.decode("utf-8"), new_name).encode("utf-8")
                    mode = 0o755 if rel.startswith("scripts/") else 0o644
                    reserved += self._reserve(len(data))
                    root.write_bytes(f"{staging}/{rel}", data, mode=mode, mkdirs=True)
                try:
                    root.rename(staging, f"{USER_SKILLS_DIRNAME}/{new_name}")
                except safe_fs.Conflict:
                    raise SkillFormatError(exists) from None
                staging = ""
                return len(files)
            finally:
                if staging:
                    root.rmtree(staging)
                    self._release(reserved)

    @staticmethod
    def _raw(source: Skill, rel: str) -> bytes:
        assert source.anchor is not None
        try:
            with safe_fs.Root.open(source.anchor) as anchor:
                return anchor.read_bytes(f"{source.rel_dir}/{rel}", MAX_FORK_BYTES, strict=True)
        except safe_fs.TooLarge:
            raise SkillFormatError("the skill is too large to copy") from None


def skill_host_tools(registry: SkillRegistry, user_root: Path, on_model_switch: ModelSwitch | None = None,
                     ledger: quota.Ledger | None = None) -> list[SkillHostTool]:
    tools = SkillTools(registry, user_root, on_model_switch, ledger)
    return [
        SkillHostTool(SCHEMAS["load_skill"], tools.load_skill),
        SkillHostTool(SCHEMAS["read_skill_file"], tools.read_skill_file),
        SkillHostTool(SCHEMAS["save_skill"], tools.save_skill),
        SkillHostTool(SCHEMAS["fork_skill"], tools.fork_skill),
    ]


def register_skill_tools(toolbox: Any, registry: SkillRegistry, user_root: Path,
                         on_model_switch: ModelSwitch | None = None, ledger: quota.Ledger | None = None) -> list[SkillHostTool]:
    """Add the four skill tools to a `RunnerToolBox` (anything with `add_host_tool(tool)`)."""
    tools = skill_host_tools(registry, user_root, on_model_switch, ledger)
    for tool in tools:
        toolbox.add_host_tool(tool)
    return tools
