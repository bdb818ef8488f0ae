"""The skill registry (seed 003 §3.5): progressive disclosure over ordered sources.

Sources, in order: the built-in skills (`<repo>/skills`, read-only, shipped with the code) and the
user's own (`<user_root>/.skills`, writable through `save_skill` / `fork_skill`). A later source
wins on a name clash — a user's copy replaces the built-in of the same name for that user only —
and the override is marked, never silent. A skill that fails to load (bad frontmatter, missing
description, unreadable file) goes into `load_errors`, which the system prompt shows so the user
can fix it; it never breaks the scan.

A skill is a folder `<name>/SKILL.md` (YAML frontmatter `name`, `description`, optional `model`)
plus optional `references/` (read on demand), `scripts/` (run in the sandbox) and `assets/`.
Frontmatter `model:` is honoured for built-in skills only (a user could otherwise pick any model
by writing one line); see `tools/skill_tools.py`.

Sandbox paths (`SkillPaths`, from the service's settings): built-in skills are mounted read-only at
`ZCBOT_SANDBOX_SKILLS_DIR` (default `/sandbox/skills`), the platform rendering package at
`ZCBOT_SANDBOX_RENDERING_DIR` (`/sandbox/rendering`); user skills are inside the user root, so the
sandbox sees them at `/workspace/.skills/<name>`. The built-in folder on the host is
`ZCBOT_SKILLS_DIR` or `<repo>/skills`.

The task "constitution" naming rule that skills share lives in `zcbot_core.workspace.constitution`.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from zcbot_core import safe_fs
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import REPO_ROOT, Settings
from zcbot_core.safe_fs.paths import PathRejected, validate_task_name

SKILL_FILE = "SKILL.md"
USER_SKILLS_DIRNAME = ".skills"
SANDBOX_WORKSPACE = "/workspace"
MAX_SKILL_BYTES = 256 * 1024
MAX_DESCRIPTION = 1024
MAX_SKILLS_PER_SOURCE = 200
SUPPORT_DIRS = ("references", "scripts", "assets")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class SkillPaths:
    """Where the built-in skills are on the host, and where a sandbox sees them and the rendering
    package. Built from the settings of the service that owns them (`from_settings`): the registry
    (gateway, runner) and the sandbox mounts (executor) must agree, so nothing here reads the
    process's settings behind the caller's back."""

    builtin_dir: Path
    sandbox_skills_dir: str
    sandbox_rendering_dir: str

    @classmethod
    def from_settings(cls, settings: Settings, builtin_dir: Path | None = None) -> "SkillPaths":
        """`ZCBOT_SKILLS_DIR` (or `builtin_dir`, or `<repo>/skills`) and the two sandbox paths."""
        host = builtin_dir or settings.zcbot_skills_dir or (REPO_ROOT / "skills")
        return cls(Path(host).expanduser().resolve(), settings.zcbot_sandbox_skills_dir.rstrip("/"),
                   settings.zcbot_sandbox_rendering_dir.rstrip("/"))

    @classmethod
    def defaults(cls, builtin_dir: Path | None = None) -> "SkillPaths":
        """The settings' declared defaults, without reading the environment (tests, tools used
        outside a service)."""
        return cls.from_settings(Settings.model_construct(), builtin_dir)


class SkillFormatError(ZcbotError, ValueError):
    """A SKILL.md (or a skill name) that is not acceptable; the message says what to fix."""

    code = "skill_format"
    http_status = 400


def validate_skill_name(name: str) -> str:
    """Skill names: 1-64 of lowercase letters, digits, '-' and '_', starting with a letter/digit."""
    try:
        name = validate_task_name(name, "skill name")
    except PathRejected as exc:
        raise SkillFormatError(str(exc)) from None
    if not _NAME.match(name):
        raise SkillFormatError(
            f"skill name {name!r} must be 1-64 characters of lowercase letters, digits, '-' or '_', starting with a letter or digit"
        )
    return name


def parse_skill_md(text: str) -> tuple[dict, str]:
    """(frontmatter, body) of a SKILL.md; raises SkillFormatError saying what is wrong."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        raise SkillFormatError("SKILL.md must start with YAML frontmatter between '---' lines (name, description)")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillFormatError("the frontmatter is not closed: add a '---' line after it") from None
    try:
        meta = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise SkillFormatError(f"the frontmatter is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(meta, dict):
        raise SkillFormatError("the frontmatter must be a YAML mapping (key: value lines)")
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SkillFormatError("the frontmatter needs `name:`")
    validate_skill_name(name.strip())
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFormatError("the frontmatter needs a non-empty `description:` (it decides when the skill is used)")
    if len(description) > MAX_DESCRIPTION:
        raise SkillFormatError(f"`description` is {len(description)} characters; keep it under {MAX_DESCRIPTION}")
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise SkillFormatError("`model:` must be a model profile name (a string)")
    meta["name"] = name.strip()
    meta["description"] = " ".join(description.split())
    return meta, "\n".join(lines[end + 1:]).strip("\n")


@dataclass(frozen=True)
class SkillSource:
    kind: str  # builtin | user
    root: Path
    sandbox_root: str | None  # how the sandbox sees `root` (None: not reachable from the sandbox)
    anchor: Path | None = None  # the folder opened as the safe_fs root (user skills: the user root)

    @property
    def base(self) -> tuple[Path, str]:
        """(safe_fs root, `root` relative to it): user skills are resolved from the user root's fd,
        so `.skills` itself being swapped for a symlink is refused too."""
        if self.anchor is None:
            return self.root, ""
        return self.anchor, self.root.relative_to(self.anchor).as_posix()

    @property
    def writable(self) -> bool:
        return self.kind == "user"


@dataclass
class Skill:
    name: str
    description: str
    source: str  # builtin | user
    folder: Path
    body: str
    meta: dict
    sandbox_dir: str | None = None
    overrides: bool = False  # a user skill replacing a built-in of the same name
    anchor: Path | None = None  # safe_fs root the folder is read through (default: its parent)
    rel_dir: str = ""  # the folder relative to `anchor`

    def __post_init__(self) -> None:
        if self.anchor is None:
            self.anchor, self.rel_dir = self.folder.parent, self.folder.name

    def read(self, rel: str, limit: int = MAX_SKILL_BYTES) -> str:
        """One of the skill's files as UTF-8 text (SkillFileMissing when absent)."""
        assert self.anchor is not None
        return read_skill_text(self.anchor, f"{self.rel_dir}/{rel}", limit)

    @property
    def model(self) -> str | None:
        """The model profile this skill asks for (built-in skills only)."""
        value = self.meta.get("model")
        return value.strip() if self.source == "builtin" and isinstance(value, str) and value.strip() else None

    def files(self, limit: int = 200) -> list[str]:
        """Support files (relative posix paths) under references/, scripts/ and assets/: regular
        files only, listed through directory fds (a symlink is never entered)."""
        out: list[str] = []
        assert self.anchor is not None
        try:
            with safe_fs.Root.open(self.anchor) as anchor, anchor.sub(self.rel_dir) as folder:
                for sub in SUPPORT_DIRS:
                    if folder.is_dir(sub):
                        out.extend(rel for rel, _ in folder.walk_files(sub, skip=_not_shipped, max_depth=16))
        except PathRejected:
            pass
        return out[:limit]

    def sandbox_path(self, rel: str) -> str | None:
        return f"{self.sandbox_dir}/{rel}" if self.sandbox_dir else None


@dataclass
class LoadError:
    source: str
    path: str  # shown to the user: `.skills/<name>/SKILL.md` for user skills
    error: str

    def line(self) -> str:
        return f"{self.path}: {self.error}"


def _not_shipped(name: str) -> bool:
    return name.startswith("__") or name.endswith(".pyc")


class SkillFileMissing(SkillFormatError):
    """The skill has no such file."""

    code = "skill_file_missing"


def read_in(root: safe_fs.Root, rel: str, limit: int = MAX_SKILL_BYTES) -> str:
    """A skill file beneath an open safe_fs root, at most `limit` bytes, as UTF-8 (no symlinks)."""
    try:
        data = root.read_bytes(rel, limit, strict=True)
    except safe_fs.NotFound:
        raise SkillFileMissing("missing") from None
    except safe_fs.TooLarge:
        raise SkillFormatError(f"is larger than {limit // 1024} KB") from None
    except safe_fs.SymlinkRefused:
        raise SkillFormatError("is a symlink (or lies behind one); only plain files are read") from None
    except PathRejected as exc:
        raise SkillFormatError(str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFormatError("is not UTF-8 text") from None


def read_skill_text(anchor: Path, rel: str, limit: int = MAX_SKILL_BYTES) -> str:
    """`read_in` from the folder `anchor` (the trusted root: the user root or the built-in folder)."""
    try:
        root = safe_fs.Root.open(anchor)
    except PathRejected:
        raise SkillFileMissing("missing") from None
    with root:
        return read_in(root, rel, limit)


_BUILTIN_CACHE: dict[tuple[str, str | None], tuple[tuple[tuple[str, int], ...], list["Skill"], list["LoadError"]]] = {}


@dataclass
class SkillRegistry:
    sources: list[SkillSource]
    rendering_dir: str  # where the sandbox sees the rendering package (`SkillPaths.sandbox_rendering_dir`)
    skills: dict[str, Skill] = field(default_factory=dict)
    load_errors: list[LoadError] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reload()

    def reload(self) -> "SkillRegistry":
        self.skills, self.load_errors = {}, []
        for source in self.sources:
            for skill in self._scan(source):
                previous = self.skills.get(skill.name)
                if previous is not None:
                    skill.overrides = previous.source == "builtin" or previous.overrides
                self.skills[skill.name] = skill
        return self

    def _display(self, source: SkillSource, folder: Path) -> str:
        if source.kind == "user":
            return f"{USER_SKILLS_DIRNAME}/{folder.name}/{SKILL_FILE}"
        return f"skills/{folder.name}/{SKILL_FILE}"

    def _scan(self, source: SkillSource) -> list[Skill]:
        if source.kind != "builtin":
            return self._scan_folder(source)
        # Built-in skills are read-only and the same for every run: parse them once per change.
        try:
            signature = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in source.root.glob(f"*/{SKILL_FILE}")))
        except OSError:
            signature = None
        key = (str(source.root), source.sandbox_root)
        cached = _BUILTIN_CACHE.get(key)
        if signature is not None and cached is not None and cached[0] == signature:
            self.load_errors.extend(cached[2])
            return [replace(skill) for skill in cached[1]]
        errors_before = len(self.load_errors)
        found = self._scan_folder(source)
        if signature is not None:
            _BUILTIN_CACHE[key] = (signature, [replace(skill) for skill in found], self.load_errors[errors_before:])
        return found

    def _scan_folder(self, source: SkillSource) -> list[Skill]:
        anchor_path, prefix = source.base
        found: list[Skill] = []
        try:
            anchor = safe_fs.Root.open(anchor_path)
        except PathRejected:
            return found
        with anchor:
            try:
                root = anchor.sub(prefix)
            except safe_fs.NotFound:
                return found
            except PathRejected:
                self.load_errors.append(LoadError(source.kind, source.root.name, "the skills folder is not a plain folder; ignored"))
                return found
            with root:
                try:
                    entries = sorted(root.listdir())
                except PathRejected as exc:
                    self.load_errors.append(LoadError(source.kind, source.root.name, f"cannot be listed: {exc}"))
                    return found
                for name, st in entries[:MAX_SKILLS_PER_SOURCE]:
                    if name.startswith((".", "_")) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        continue
                    folder = source.root / name
                    shown = self._display(source, folder)
                    try:
                        if stat.S_ISLNK(st.st_mode):
                            raise SkillFormatError("the skill folder is a symlink; only plain folders are loaded")
                        meta, body = parse_skill_md(read_in(root, f"{name}/{SKILL_FILE}"))
                        if meta["name"] != name:
                            raise SkillFormatError(f"`name: {meta['name']}` does not match its folder name `{name}`")
                    except SkillFileMissing:
                        self.load_errors.append(LoadError(source.kind, shown, "missing (every skill folder needs a SKILL.md)"))
                        continue
                    except SkillFormatError as exc:
                        self.load_errors.append(LoadError(source.kind, shown, str(exc)))
                        continue
                    sandbox_dir = f"{source.sandbox_root}/{name}" if source.sandbox_root else None
                    rel_dir = f"{prefix}/{name}" if prefix else name
                    found.append(Skill(meta["name"], meta["description"], source.kind, folder, body, meta, sandbox_dir,
                                       anchor=anchor_path, rel_dir=rel_dir))
        return found

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)

    def list(self) -> list[Skill]:
        return [self.skills[k] for k in sorted(self.skills)]

    def builtin(self, name: str) -> Skill | None:
        """The built-in skill of that name even when the user overrides it (for fork_skill)."""
        for source in self.sources:
            if source.kind == "builtin":
                folder = source.root / name
                if isinstance(name, str) and _NAME.match(name):
                    try:
                        meta, body = parse_skill_md(read_skill_text(source.root, f"{name}/{SKILL_FILE}"))
                    except SkillFormatError:
                        return None
                    sandbox_dir = f"{source.sandbox_root}/{name}" if source.sandbox_root else None
                    return Skill(meta["name"], meta["description"], "builtin", folder, body, meta, sandbox_dir)
        return None

    @property
    def user_root_dir(self) -> Path | None:
        for source in self.sources:
            if source.kind == "user":
                return source.root
        return None


def registry_for_user(user_root: Path | None, paths: SkillPaths) -> SkillRegistry:
    """Built-in skills + the user's `.skills` (when `user_root` is given)."""
    sources = [SkillSource("builtin", paths.builtin_dir, paths.sandbox_skills_dir)]
    if user_root is not None:
        sources.append(SkillSource("user", Path(user_root) / USER_SKILLS_DIRNAME,
                                   f"{SANDBOX_WORKSPACE}/{USER_SKILLS_DIRNAME}", anchor=Path(user_root)))
    return SkillRegistry(sources, paths.sandbox_rendering_dir)


def discovery_block(registry: SkillRegistry) -> str:
    """The system-prompt section listing skills (name + description) and load errors."""
    lines = ["## Skills",
             "Skills are playbooks for a kind of work. When the user's request matches a skill's description, "
             "call `load_skill` with its name before you start, and follow it; its reference files are read "
             "with `read_skill_file` when you need them."]
    skills = registry.list()
    if skills:
        for skill in skills:
            mark = ""
            if skill.source == "user":
                mark = " (the user's own version, replacing the built-in one)" if skill.overrides else " (the user's own skill)"
            lines.append(f"- {skill.name}{mark}: {skill.description}")
    else:
        lines.append("- (no skills are installed)")
    lines.append(f"The user's own skills live in `{SANDBOX_WORKSPACE}/{USER_SKILLS_DIRNAME}/<name>/`; create or change "
                 "them only with `save_skill`, and start from a built-in one with `fork_skill`.")
    if registry.load_errors:
        lines.append("")
        lines.append("These skills could not be loaded; tell the user what is wrong so they can fix it "
                     "(with `save_skill` if they ask you to):")
        lines.extend(f"- {err.line()}" for err in registry.load_errors)
    return "\n".join(lines)
