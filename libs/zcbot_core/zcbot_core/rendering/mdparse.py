"""A small, predictable Markdown reader for documents (stdlib only).

It reads the subset that documents use and nothing more, into a flat list of blocks:

- `---` frontmatter at the top: `key: value` lines (title, subtitle, author, date, lang, ...)
- ATX headings `#`..`######`
- paragraphs (consecutive lines are joined; no space is inserted between CJK characters)
- bullet (`-`, `*`, `+`) and ordered (`1.`, `1)`) lists, nested by indentation (2+ spaces)
- GFM pipe tables, with an optional caption line `Table: ...` / `表: ...` right before or after
- images on their own line `![caption](path)` (optionally `{width=60%}` after it) -> figures
- fenced code blocks, `>` quotes, `---`/`***` rules, and page breaks (`\\newpage`, `<!-- pagebreak -->`)
- footnote definitions `[^id]: text` (anywhere, continuation lines indented) -> `Document.footnotes`

Inline markup (`**bold**`, `*italic*`, `` `code` ``, `[text](url)`, `~sub~`, `^sup^`) is parsed by
`parse_inline` into spans; renderers decide how spans look. Footnote marks `[^id]` become note spans;
citations `[1]`, `[1,2]`, `[1-3]` become superscript spans (the space before one is dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str


@dataclass
class ListItem:
    level: int
    text: str
    ordered: bool


@dataclass
class ListBlock:
    items: list[ListItem]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    align: list[str] = field(default_factory=list)  # left | center | right per column
    caption: str = ""


@dataclass
class Image:
    path: str
    caption: str = ""
    width: str = ""  # e.g. "60%" or "12cm" or ""


@dataclass
class Code:
    text: str
    lang: str = ""


@dataclass
class Quote:
    text: str


@dataclass
class Rule:
    pass


@dataclass
class PageBreak:
    pass


Block = Heading | Paragraph | ListBlock | Table | Image | Code | Quote | Rule | PageBreak


@dataclass
class Document:
    meta: dict[str, str]
    blocks: list[Block]
    footnotes: dict[str, str] = field(default_factory=dict)

    def inline_texts(self) -> list[str]:
        """Every piece of inline Markdown in the body (code blocks excluded)."""
        out: list[str] = []
        for b in self.blocks:
            if isinstance(b, (Heading, Paragraph, Quote)):
                out.append(b.text)
            elif isinstance(b, ListBlock):
                out.extend(item.text for item in b.items)
            elif isinstance(b, Table):
                out.extend([b.caption, *b.header, *(cell for row in b.rows for cell in row)])
            elif isinstance(b, Image):
                out.append(b.caption)
        return out

    def undefined_notes(self) -> list[str]:
        """Footnote marks `[^id]` used in the text without a definition `[^id]: ...`, in order."""
        used = [s.note for text in self.inline_texts() for s in parse_inline(text) if s.note]
        return list(dict.fromkeys(n for n in used if n not in self.footnotes))

    @property
    def is_cjk(self) -> bool:
        """True when the text is mostly Chinese/Japanese (decides caption words, indents)."""
        lang = self.meta.get("lang", "").lower()
        if lang:
            return lang.startswith(("zh", "ja", "cn"))
        sample = "".join(b.text for b in self.blocks if isinstance(b, (Heading, Paragraph)))[:4000]
        letters = sum(1 for ch in sample if ch.isalpha())
        return bool(letters) and len(CJK.findall(sample)) / letters > 0.3


# ---- inline -----------------------------------------------------------------------------------

@dataclass
class Span:
    text: str
    bold: bool = False
    italic: bool = False
    code: bool = False
    sub: bool = False
    sup: bool = False
    link: str = ""
    note: str = ""  # a footnote mark: the footnote's id


_INLINE = re.compile(
    r"(?P<code>`[^`]+`)"
    r"|(?P<bold>\*\*(?=\S)(?:[^*]|\*(?!\*))+?\*\*|__(?=\S)[^_]+?__)"
    r"|(?P<italic>\*(?=[^\s*])[^*]+?\*|(?<![A-Za-z0-9])_(?=\S)[^_]+?_(?![A-Za-z0-9]))"
    r"|(?P<note>\[\^[^\]\s]{1,40}\])"
    r"|(?P<link>\[[^\]]+\]\([^)\s]+\))"
    r"|(?P<cite>\[\d{1,3}(?:\s*[-–—,，、]\s*\d{1,3}){0,20}\](?!\())"
    r"|(?P<sub>~(?!~)[^~\s]{1,20}~)"
    r"|(?P<sup>\^[^^\s]{1,20}\^)"
)


def parse_inline(text: str, _style: dict | None = None) -> list[Span]:
    """Spans of `text`; markers nest (e.g. bold inside a link text)."""
    style = dict(_style or {})
    spans: list[Span] = []
    pos = 0
    text = text.replace("\\*", "\x01").replace("\\_", "\x02").replace("\\`", "\x03")
    for m in _INLINE.finditer(text):
        if m.start() > pos:
            spans.append(Span(_unescape(text[pos:m.start()]), **style))
        kind = m.lastgroup
        token = m.group()
        if kind == "code":
            spans.append(Span(_unescape(token[1:-1]), **{**style, "code": True}))
        elif kind == "bold":
            spans.extend(parse_inline(token[2:-2], {**style, "bold": True}))
        elif kind == "italic":
            spans.extend(parse_inline(token[1:-1], {**style, "italic": True}))
        elif kind == "link":
            label, _, url = token[1:-1].partition("](")
            spans.extend(parse_inline(label, {**style, "link": url}))
        elif kind == "note":
            spans.append(Span(token[2:-1], **{**style, "note": token[2:-1]}))
        elif kind == "cite":
            if spans and spans[-1].text.endswith(" ") and not spans[-1].link:
                spans[-1].text = spans[-1].text.rstrip(" ")  # "latency [1]" -> "latency[1]" (superscript)
            # WORD JOINER: the mark never starts a line on its own ("方向\n[1]。"), nor breaks after
            # its own hyphen or comma ("寿命[4-\n6]").
            token = re.sub(r"([-–—,，、])", "\\1\u2060", token)
            spans.append(Span("\u2060" + token, **{**style, "sup": True}))
        elif kind == "sub":
            spans.append(Span(_unescape(token[1:-1]), **{**style, "sub": True}))
        elif kind == "sup":
            spans.append(Span(_unescape(token[1:-1]), **{**style, "sup": True}))
        pos = m.end()
    if pos < len(text):
        spans.append(Span(_unescape(text[pos:]), **style))
    return [s for s in spans if s.text]


def _unescape(s: str) -> str:
    return s.replace("\x01", "*").replace("\x02", "_").replace("\x03", "`")


def plain_text(text: str) -> str:
    return "".join(s.text for s in parse_inline(text) if not s.note)


# ---- blocks -----------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)([-*+])\s+(.*)$")
_ORDERED = re.compile(r"^(\s*)(\d{1,3})[.)]\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)\s*$")
_IMAGE = re.compile(r"^\s*!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+)(?:\s+\"[^\"]*\")?\)\s*(?:\{\s*width\s*=\s*(?P<w>[\d.]+(?:%|cm|mm|in))\s*\})?\s*$")
_RULE = re.compile(r"^\s*(?:-{3,}|\*{3,}|_{3,})\s*$")
_PAGEBREAK = re.compile(r"^\s*(?:\\newpage|\\pagebreak|<!--\s*pagebreak\s*-->)\s*$", re.I)
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_META_LINE = re.compile(r"^(?:[A-Za-z_][\w-]*\s*:|\s|-|#)")
_FOOTNOTE_DEF = re.compile(r"^\[\^([^\]\s]{1,40})\]:\s*(.*)$")
_CAPTION = re.compile(r"^\s*(?:Table|表)\s*[:：]\s*(.+)$", re.I)


def join_lines(lines: list[str]) -> str:
    """Join wrapped lines: no space between two CJK characters, one space otherwise."""
    out = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if out and not (CJK.match(out[-1]) and CJK.match(line[0])):
            out += " "
        out += line
    return out


def split_row(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    cells = re.split(r"(?<!\\)\|", line)
    return [c.strip().replace("\\|", "|") for c in cells]


def parse_frontmatter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    for end in range(1, min(len(lines), 200)):
        if lines[end].strip() in ("---", "..."):
            body_lines = [ln for ln in lines[1:end] if ln.strip()]
            if not body_lines or not all(_META_LINE.match(ln) for ln in body_lines):
                return {}, text  # a horizontal rule, not frontmatter
            meta: dict[str, str] = {}
            for line in lines[1:end]:
                key, sep, value = line.partition(":")
                if sep and key.strip() and not key.startswith((" ", "\t", "#")):
                    value = re.sub(r"\s+#.*$", "", value)  # a YAML comment, as in the documented examples
                    meta[key.strip().lower()] = value.strip().strip("\"'")
            return meta, "\n".join(lines[end + 1:])
    return {}, text


def parse(text: str) -> Document:
    meta, body = parse_frontmatter(text.replace("\r\n", "\n").replace("\t", "    "))
    footnotes, lines = _footnote_definitions(body.split("\n"))
    blocks: list[Block] = []
    i = 0
    para: list[str] = []
    pending_caption = ""

    def flush() -> None:
        nonlocal para
        if para:
            blocks.append(Paragraph(join_lines(para)))
            para = []

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            flush()
            marker, lang = fence.group(1), fence.group(2)
            body_lines = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body_lines.append(lines[i])
                i += 1
            blocks.append(Code("\n".join(body_lines), lang))
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            blocks.append(Heading(len(heading.group(1)), heading.group(2).strip()))
            i += 1
            continue
        if _PAGEBREAK.match(line):
            flush()
            blocks.append(PageBreak())
            i += 1
            continue
        if _RULE.match(line):
            flush()
            blocks.append(Rule())
            i += 1
            continue
        image = _IMAGE.match(line)
        if image and not para:
            blocks.append(Image(image.group("path"), image.group("alt").strip(), image.group("w") or ""))
            i += 1
            continue
        caption = _CAPTION.match(line)
        if caption and not para:
            # A caption belongs to the table right before it, or the one right after it.
            if blocks and isinstance(blocks[-1], Table) and not blocks[-1].caption:
                blocks[-1].caption = caption.group(1).strip()
            else:
                pending_caption = caption.group(1).strip()
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]) and not para:
            header = split_row(line)
            align = []
            for cell in split_row(lines[i + 1]):
                c = cell.strip()
                align.append("center" if c.startswith(":") and c.endswith(":") else "right" if c.endswith(":") else "left")
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                row = split_row(lines[i])
                row = (row + [""] * len(header))[: len(header)]
                rows.append(row)
                i += 1
            blocks.append(Table(header, rows, align, pending_caption))
            pending_caption = ""
            continue
        if _BULLET.match(line) or _ORDERED.match(line):
            flush()
            items: list[ListItem] = []
            indents: list[int] = []
            while i < len(lines):
                cur = lines[i]
                m = _BULLET.match(cur) or _ORDERED.match(cur)
                if m:
                    indent = len(m.group(1))
                    while indents and indent < indents[-1]:
                        indents.pop()
                    if not indents or indent > indents[-1]:
                        indents.append(indent)
                    items.append(ListItem(len(indents) - 1, m.group(3).strip(), ordered=bool(_ORDERED.match(cur))))
                    i += 1
                elif cur.strip() and cur.startswith("  ") and items:
                    items[-1].text = join_lines([items[-1].text, cur])  # continuation line
                    i += 1
                else:
                    break
            blocks.append(ListBlock(items))
            continue
        if line.lstrip().startswith(">"):
            flush()
            quote = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quote.append(lines[i].lstrip()[1:])
                i += 1
            blocks.append(Quote(join_lines(quote)))
            continue
        para.append(line)
        i += 1
    flush()
    return Document(meta, blocks, footnotes)


def _footnote_definitions(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """Take `[^id]: text` definitions (and their indented continuation lines) out of the body."""
    notes: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _FOOTNOTE_DEF.match(line)
        if not m:
            kept.append(line)
            i += 1
            continue
        parts = [m.group(2)]
        i += 1
        while i < len(lines) and lines[i].startswith(("  ", "    ")) and lines[i].strip():
            parts.append(lines[i])
            i += 1
        notes[m.group(1)] = join_lines(parts)
    return notes, kept
