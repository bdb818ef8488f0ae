"""The pptx guard (seed 003 §8.9): reject decks made of full-slide pictures, whatever made them.

After every `shell` / `run_python` call, each `.pptx` in the task folder written since the call
started is inspected. The rule is deliberately conservative — a deck is rejected only when all of:
- it has at least 2 slides,
- at least 80% of its slides carry a full-slide picture (a picture covering >= 85% of the slide,
  or a picture background),
- the whole deck has no text, no table and no chart on any slide.
Anything that cannot be parsed is allowed (the guard checks products, never commands, and never
blocks on its own failure). When it fires, the tool result becomes an error naming the file, so
the model reworks the deck in the same run. The message names what is wrong and the sanctioned
way forward; it carries no recipe for doing the rejected thing differently.

Safety on the host: the folder is written by sandboxed code, so it is walked and read through
`zcbot_core.safe_fs` (beneath the user root's fd, symlinks never followed), files are size-capped
and parsing runs in a worker thread with a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.safe_fs.paths import PathRejected, normalize_rel
from zcbot_core.tools.results import ToolOutcome, preview

log = logging.getLogger(__name__)

GUARDED_TOOLS = frozenset({"shell", "run_python"})
MIN_SLIDES = 2
PICTURE_SLIDE_SHARE = 0.8
FULL_SLIDE_AREA = 0.85
MTIME_SLACK = 2.0  # seconds: clock/mtime granularity (the file server may be another host)
MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_FILES = 50
MAX_DEPTH = 6
PARSE_TIMEOUT = 20.0

Hook = Callable[[str, dict[str, Any], ToolOutcome, float], Awaitable[ToolOutcome]]


@dataclass
class DeckVerdict:
    reject: bool
    slides: int = 0
    picture_slides: int = 0
    reason: str = ""


def _walk_shapes(shapes):
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _walk_shapes(shape.shapes)
        else:
            yield shape


def _is_picture(shape) -> bool:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.PICTURE:
        return True
    # A picture placeholder that holds an image, or any shape filled with an image.
    el = shape._element
    return el.find(".//{http://schemas.openxmlformats.org/drawingml/2006/main}blip") is not None


def _background_is_picture(slide) -> bool:
    bg = slide._element.find("{http://schemas.openxmlformats.org/presentationml/2006/main}cSld/"
                             "{http://schemas.openxmlformats.org/presentationml/2006/main}bg")
    return bg is not None and bg.find(".//{http://schemas.openxmlformats.org/drawingml/2006/main}blip") is not None


def inspect_deck(path: Path | safe_fs.UserFile) -> DeckVerdict:
    """The verdict for one deck (raises on unreadable files: the caller allows those)."""
    from pptx import Presentation

    with path.open("rb") as fh:  # a UserFile opens through safe_fs: no symlink is followed
        prs = Presentation(fh)
    sw, sh = int(prs.slide_width or 0), int(prs.slide_height or 0)
    area = sw * sh
    slides = list(prs.slides)
    picture_slides = 0
    for slide in slides:
        full = _background_is_picture(slide)
        for shape in _walk_shapes(slide.shapes):
            if shape.has_text_frame and shape.text_frame.text.strip():
                return DeckVerdict(False, len(slides), picture_slides, "has text")
            if getattr(shape, "has_table", False) and shape.has_table:
                return DeckVerdict(False, len(slides), picture_slides, "has a table")
            if getattr(shape, "has_chart", False) and shape.has_chart:
                return DeckVerdict(False, len(slides), picture_slides, "has a chart")
            if not full and area and _is_picture(shape):
                try:
                    x0, y0 = max(int(shape.left), 0), max(int(shape.top), 0)
                    x1, y1 = min(int(shape.left) + int(shape.width), sw), min(int(shape.top) + int(shape.height), sh)
                except (TypeError, ValueError):
                    continue
                if x1 > x0 and y1 > y0 and (x1 - x0) * (y1 - y0) >= FULL_SLIDE_AREA * area:
                    full = True
        picture_slides += int(full)
    reject = len(slides) >= MIN_SLIDES and picture_slides >= PICTURE_SLIDE_SHARE * len(slides)
    return DeckVerdict(reject, len(slides), picture_slides, "full-slide pictures only" if reject else "")


def new_decks(root: Path, rel_dir: str, since: float) -> list[safe_fs.UserFile]:
    """.pptx files under the folder `rel_dir` of `root` (walked through directory fds, never
    following a symlink, skipping dot folders) modified since `since`."""
    try:
        with safe_fs.Root.open(root) as r:
            files = r.walk_files(rel_dir, skip=lambda name: name.startswith("~$"), max_depth=MAX_DEPTH)
    except PathRejected:
        return []
    found = [safe_fs.UserFile(root, rel) for rel, st in files
             if rel.lower().endswith(".pptx") and st.st_size <= MAX_FILE_BYTES and st.st_mtime >= since - MTIME_SLACK]
    return found[:MAX_FILES]


def rejection_message(rel: str, verdict: DeckVerdict) -> str:
    return (
        f"ERROR: {rel} was rejected: {verdict.picture_slides} of its {verdict.slides} slides are full-slide pictures "
        "and the deck has no editable text, tables or charts. A deck must be built from real slide elements "
        "(text, tables, native charts, pictures as parts of a slide) through the ppt skill's deck script. "
        "Rebuild it that way; if that script fails, fix the cause or tell the user plainly what failed."
    )


async def check_folder(root: Path, rel_dir: str, since: float) -> list[str]:
    """Rejection messages for the new decks in the folder `rel_dir` of `root` (empty when all are fine)."""
    messages: list[str] = []
    decks = await asyncio.to_thread(new_decks, root, rel_dir, since)
    for deck in decks:
        try:
            verdict = await asyncio.wait_for(asyncio.to_thread(inspect_deck, deck), PARSE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - unreadable or slow: allowed by rule
            log.info("pptx guard could not inspect a deck; allowing it", extra={"path": deck.rel, "error": str(exc)})
            continue
        if verdict.reject:
            messages.append(rejection_message(deck.relative_to(rel_dir), verdict))
    return messages


def make_pptx_guard_hook(root: Path, working_dir: str = "", tools: frozenset[str] = GUARDED_TOOLS) -> Hook:
    """A `RunnerToolBox.after_hooks` hook guarding the task folder `working_dir` of the user root
    `root` (resolved beneath the root's fd at every check)."""
    root = Path(root)
    rel_dir = normalize_rel(working_dir)

    async def hook(name: str, args: dict[str, Any], outcome: ToolOutcome, started_ts: float) -> ToolOutcome:
        if name not in tools:
            return outcome
        try:
            messages = await check_folder(root, rel_dir, started_ts or time.time())
        except Exception:  # noqa: BLE001 - the guard never breaks a tool call
            log.warning("pptx guard failed; allowing", exc_info=True)
            return outcome
        if not messages:
            return outcome
        error = "\n".join(messages)
        text = f"{outcome.output}\n\n{error}" if outcome.output else error
        return ToolOutcome(ok=False, output=text, preview=preview(f"{error}\n{outcome.preview}"), truncated=outcome.truncated)

    return hook
