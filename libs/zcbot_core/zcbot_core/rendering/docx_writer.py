"""Markdown blocks -> a python-docx Document, driven by a `DocStyle` (one per document profile).

The profiles (`docx_manuscript.PROFILES`, `docx_brief.BRIEF`) only differ in data: fonts, sizes,
spacing, heading numbering, table look, caption words. The walker is shared so every profile
handles the same Markdown the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from docx import Document as new_document
from docx.enum.table import WD_CELL_VERTICAL_ALIGNMENT, WD_TABLE_ALIGNMENT
from docx.enum.text import WD_ALIGN_PARAGRAPH
from docx.shared import Pt, RGBColor

from . import common
from .docx_inline import add_spans
from .docx_keep import keep_lead_in, list_keeps, same_date_in
from .docx_lists import ListNumbering, Numberer
from .docx_notes import Footnotes, set_metadata
from .docx_style import DocStyle, apply_style
from .docx_tables import column_widths, display_width, set_column_widths
from .mdparse import (
    Code,
    Document,
    Heading,
    Image,
    ListBlock,
    PageBreak,
    Paragraph,
    Quote,
    Rule,
    Table,
    parse,
    plain_text,
)


@dataclass
class RenderReport:
    out: Path
    headings: int = 0
    tables: int = 0
    figures: int = 0
    references: int = 0
    characters: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (f"wrote {self.out} ({self.headings} headings, {self.tables} tables, {self.figures} figures, "
                f"{self.references} references, {self.characters} characters)")
        if self.problems:
            text += "\nproblems:\n" + "\n".join(f"- {p}" for p in self.problems)
        return text


REFERENCE_TITLES = re.compile(r"^\s*(参考文献|references|bibliography|引用文献|主要参考文献)\s*$", re.I)
UNNUMBERED = re.compile(r"^\s*(参考文献|references|bibliography|摘要|abstract|致谢|acknowledg(e)?ments?|附录.*|appendix.*|目录|contents)\s*$", re.I)
ALREADY_NUMBERED = re.compile(r"^\s*(\d+(\.\d+)*[.、\s]|[一二三四五六七八九十]+[、.．]|[（(][一二三四五六七八九十\d]+[)）]|第[一二三四五六七八九十\d]+[章节部分])")
REF_PREFIX = re.compile(r"^\s*\[\d+\]\s*")


class DocxWriter:
    def __init__(self, style: DocStyle, base_dir: Path, cjk: bool) -> None:
        self.style = style
        self.base_dir = base_dir
        self.cjk = cjk
        self.doc = new_document()
        self.report: RenderReport | None = None
        self.footnotes = Footnotes(self.doc, style.size)
        self.note_texts: dict[str, str] = {}
        self.notes_used: set[str] = set()
        self._lists: ListNumbering | None = None
        apply_style(self.doc, style)

    def _spans(self, para, text: str, **kwargs: object) -> None:
        add_spans(para, text, note=self._note, **kwargs)  # type: ignore[arg-type]

    def _note(self, para, note_id: str) -> bool:
        """A `[^id]` mark: a real footnote when defined, else left as written and reported."""
        assert self.report is not None
        text = self.note_texts.get(note_id)
        if text is None:
            self.report.problems.append(f"footnote [^{note_id}] is used but not defined (add a line "
                                        f"'[^{note_id}]: text')")
            return False
        self.notes_used.add(note_id)
        self.footnotes.add(para, lambda p: add_spans(p, text, code_font=self.style.code_font))
        return True

    def _body_format(self, para, indent: bool = True) -> None:
        pf = para.paragraph_format
        if self.style.justify:
            para.alignment = WD_ALIGN_PARAGRAPH.JUSTIFY
        if indent and self.style.first_line_chars:
            pf.first_line_indent = Pt(self.style.size * self.style.first_line_chars)
        else:
            pf.first_line_indent = Pt(0)

    # ---- document -------------------------------------------------------------------------
    def render(self, parsed: Document, out: Path) -> RenderReport:
        report = RenderReport(out=Path(out))
        self.report = report
        self.note_texts = dict(parsed.footnotes)
        blocks = list(parsed.blocks)
        title = parsed.meta.get("title", "")
        headings = [b for b in blocks if isinstance(b, Heading)]
        if not title and headings and blocks and blocks[0] is headings[0] and headings[0].level == 1 and \
                sum(1 for h in headings if h.level == 1) == 1:
            title = headings[0].text
            blocks = blocks[1:]
            headings = headings[1:]
        top = min((h.level for h in headings), default=1)
        mode = self.style.numbering
        if mode == "auto":
            numbered = any(ALREADY_NUMBERED.match(h.text) for h in headings)
            mode = "none" if numbered else ("chinese" if self.cjk else "decimal")
        numberer = Numberer(mode)
        self._title_block(title, parsed.meta)
        in_refs = False
        for block in blocks:
            if isinstance(block, Heading):
                level = max(1, block.level - top + 1)
                in_refs = bool(REFERENCE_TITLES.match(plain_text(block.text)))
                label = "" if UNNUMBERED.match(plain_text(block.text)) else numberer.label(level)
                para = self.doc.add_paragraph(style=f"Heading {min(level, 6)}")
                if label:
                    para.add_run(label)
                self._spans(para, block.text, chem=True)
                report.headings += 1
            elif isinstance(block, Paragraph):
                if in_refs:
                    self._reference(block.text)
                else:
                    para = self.doc.add_paragraph()
                    self._spans(para, block.text, code_font=self.style.code_font)
                    self._body_format(para)
                    report.characters += len(plain_text(block.text))
            elif isinstance(block, ListBlock):
                self._list(block, in_refs)
            elif isinstance(block, Table):
                self._table(block)
            elif isinstance(block, Image):
                self._figure(block)
            elif isinstance(block, Code):
                self._code(block)
            elif isinstance(block, Quote):
                para = self.doc.add_paragraph()
                self._spans(para, block.text, italic=not self.cjk and not self.style.quote_color)
                para.paragraph_format.left_indent = Pt(self.style.size * 2)
                para.paragraph_format.first_line_indent = Pt(0)
                for run in para.runs:
                    if self.style.quote_color:
                        run.font.color.rgb = RGBColor.from_string(self.style.quote_color)
                    if self.style.quote_size:
                        run.font.size = Pt(self.style.quote_size)
            elif isinstance(block, Rule):
                common.bottom_border(self.doc.add_paragraph(), 6, "999999")
            elif isinstance(block, PageBreak):
                common.page_break(self.doc)
        for unused in sorted(set(self.note_texts) - self.notes_used):
            report.problems.append(f"footnote [^{unused}] is defined but never referenced in the text")
        set_metadata(self.doc, parsed.meta, plain_text(title), self.cjk)
        common.atomic_save(self.doc, out)
        return report

    def _title_block(self, title: str, meta: dict[str, str]) -> None:
        if not title:
            return
        para = self.doc.add_paragraph(style="Title")
        self._spans(para, title)
        size = self._one_line_title_size(plain_text(title))
        if size:
            for run in para.runs:
                run.font.size = Pt(size)
        if self.style.title_rule:
            common.bottom_border(para, 12, self.style.accent)
        subtitle_bits = [meta.get(k, "") for k in ("subtitle", "author", "date")
                         if meta.get(k) and meta[k] not in title and not (k == "date" and same_date_in(meta[k], title))]
        if self.style.title_rule and subtitle_bits:
            subtitle_bits = [" · ".join(subtitle_bits)]  # briefs: one byline under the rule, not three
        for bit in subtitle_bits:
            sub = self.doc.add_paragraph()
            self._spans(sub, bit, size=self.style.size)
            sub.alignment = WD_ALIGN_PARAGRAPH.LEFT if self.style.title_rule else WD_ALIGN_PARAGRAPH.CENTER
            sub.paragraph_format.first_line_indent = Pt(0)
            for run in sub.runs:
                run.font.color.rgb = RGBColor.from_string("555555")
        if meta.get("toc", "").lower() in ("true", "yes", "1"):
            toc = self.doc.add_paragraph()
            common.add_field(toc, 'TOC \\o "1-3" \\h \\z \\u', "目录" if self.cjk else "Table of contents")
            common.page_break(self.doc)

    def _one_line_title_size(self, title: str) -> float | None:
        """A Chinese title a little too long for one line is set a little smaller (not below 18 pt,
        小二) instead of leaving one or two characters alone on a second line."""
        if not self.cjk:
            return None
        width_pt = common.text_width(self.doc) / 12700 * 0.97
        ems = display_width(title) / 2
        size = self.style.title_size
        if ems * size <= width_pt or ems * 18.0 > width_pt:
            return None
        return max(18.0, int(width_pt / ems * 2) / 2)

    def _reference(self, text: str) -> None:
        assert self.report is not None
        self.report.references += 1
        para = self.doc.add_paragraph()
        body = REF_PREFIX.sub("", text)
        para.add_run(f"[{self.report.references}] ")
        self._spans(para, body)
        pf = para.paragraph_format
        pf.left_indent = Pt(self.style.size * 2)
        pf.first_line_indent = Pt(-self.style.size * 2)
        for run in para.runs:
            run.font.size = Pt(self.style.table_size)

    def _list(self, block: ListBlock, in_refs: bool) -> None:
        assert self.report is not None
        if self._lists is None:
            self._lists = ListNumbering(self.doc, self.style.size, self.style.latin,
                                        max(self.style.first_line_chars, 0.8))
        state = self._lists.new_list()
        if not in_refs:
            keep_lead_in(self.doc)
        keep = list_keeps(len(block.items))
        for n, item in enumerate(block.items):
            if in_refs:
                self._reference(item.text)
                continue
            para = self.doc.add_paragraph()
            if n in keep:
                common.keep_with_next(para)
            state.add(para, item.level, item.ordered)
            if self.style.justify:
                para.alignment = WD_ALIGN_PARAGRAPH.JUSTIFY
            self._spans(para, item.text, code_font=self.style.code_font)
            self.report.characters += len(plain_text(item.text))

    def _caption(self, kind: str, number: int, text: str) -> None:
        if self.cjk:
            label = f"{'表' if kind == 'table' else '图'} {number}"
            sep = "\u2003" if text else ""
        else:
            label = f"{'Table' if kind == 'table' else 'Figure'} {number}"
            sep = ". " if text else ""
        para = self.doc.add_paragraph(style="Caption")
        if kind == "table" and self.style.table_style == "grid":
            para.alignment = WD_ALIGN_PARAGRAPH.LEFT  # over a left-aligned table, flush with it
        run = para.add_run(label + sep)
        run.bold = True
        self._spans(para, text)
        if kind == "table":
            common.keep_with_next(para)
        else:
            para.paragraph_format.space_after = Pt(self.style.size)  # the figure ends here: air before the text

    def _table(self, block: Table) -> None:
        assert self.report is not None
        self.report.tables += 1
        keep_lead_in(self.doc)
        if block.caption or self.style.table_style == "three-line":
            self._caption("table", self.report.tables, block.caption)
        ncols = max(1, len(block.header))
        table = self.doc.add_table(rows=1 + len(block.rows), cols=ncols)
        # Academic tables are centred; a brief's tables line up with its left-aligned text.
        table.alignment = WD_TABLE_ALIGNMENT.LEFT if self.style.table_style == "grid" else WD_TABLE_ALIGNMENT.CENTER
        for r, row in enumerate([block.header, *block.rows]):
            for c in range(ncols):
                value = row[c] if c < len(row) else ""
                cell = table.cell(r, c)
                para = cell.paragraphs[0]
                self._spans(para, value, bold=(r == 0) or None, size=self.style.table_size,
                                 code_font=self.style.code_font)
                pf = para.paragraph_format
                pf.first_line_indent = Pt(0)
                pf.line_spacing = 1.15
                pf.space_after = Pt(0)
                align = block.align[c] if c < len(block.align) else "left"
                numeric = align == "right" or (common.NUMERIC.match(plain_text(value) or "x") if r else
                                               column_is_numeric(block.rows, c))
                if align == "center":
                    para.alignment = WD_ALIGN_PARAGRAPH.CENTER
                elif numeric:  # a header sits over its column the way the column's numbers do
                    para.alignment = WD_ALIGN_PARAGRAPH.CENTER if self.style.table_style == "three-line" else WD_ALIGN_PARAGRAPH.RIGHT
                else:
                    para.alignment = WD_ALIGN_PARAGRAPH.LEFT
                cell.vertical_alignment = WD_CELL_VERTICAL_ALIGNMENT.CENTER  # CJK and Latin cells line up
                if r == 0 and self.style.header_fill:
                    common.shade_cell(cell, self.style.header_fill)
        plain_rows = [[plain_text(c) for c in row] for row in [block.header, *block.rows]]
        shrink = self.style.table_size if self.style.table_style == "grid" else None  # academic tables span the text
        set_column_widths(table, column_widths(plain_rows, common.text_width(self.doc), shrink_to_fit=shrink,
                                               size=self.style.table_size))
        common.repeat_header(table.rows[0])
        common.set_table_borders(table, self.style.table_style)
        if self.style.table_style == "grid":
            common.indent_to_text(table)
        spacer = self.doc.add_paragraph()
        spacer.paragraph_format.space_after = Pt(0)
        # A brief's table is followed by a small gap, not a blank line (a heading after it has its own space).
        spacer.paragraph_format.line_spacing = Pt(6) if self.style.table_style == "grid" else 1.0

    def _figure(self, block: Image) -> None:
        assert self.report is not None
        path = common.resolve_asset(block.path, self.base_dir)
        if not path.is_file():
            self.report.problems.append(f"figure image not found: {block.path} (looked at {path})")
            para = self.doc.add_paragraph(f"[missing figure: {block.path}]")
            para.alignment = WD_ALIGN_PARAGRAPH.CENTER
            return
        keep_lead_in(self.doc)
        try:
            width = common.picture_width(path, common.text_width(self.doc), block.width)
            para = self.doc.add_paragraph()
            para.alignment = WD_ALIGN_PARAGRAPH.CENTER
            para.paragraph_format.first_line_indent = Pt(0)
            para.paragraph_format.line_spacing = 1.0
            common.keep_with_next(para)
            para.add_run().add_picture(str(path), width=width)
        except Exception as exc:  # noqa: BLE001 - a broken image is reported, the document still renders
            self.report.problems.append(f"figure image {block.path} could not be embedded: {exc}")
            return
        self.report.figures += 1
        self._caption("figure", self.report.figures, block.caption)

    def _code(self, block: Code) -> None:
        for line in block.text.split("\n") or [""]:
            para = self.doc.add_paragraph()
            run = para.add_run(line or "\u00a0")
            common.set_run_fonts(run, self.style.code_font, self.style.east_asia)
            run.font.size = Pt(max(self.style.size - 2, 8))
            pf = para.paragraph_format
            pf.first_line_indent = Pt(0)
            pf.left_indent = Pt(self.style.size)
            pf.line_spacing = 1.0
            pf.space_after = Pt(0)
            if self.style.code_fill:
                common.shade_paragraph(para, self.style.code_fill)


def column_is_numeric(rows: list[list[str]], c: int) -> bool:
    cells = [plain_text(row[c]) for row in rows if c < len(row) and plain_text(row[c]).strip()]
    return bool(cells) and all(common.NUMERIC.match(cell) for cell in cells)


def render_docx(source: str | Document, out: Path, style: DocStyle, base_dir: Path | None = None,
                **overrides: object) -> RenderReport:
    """Render Markdown text (or a parsed Document) to `out` with `style` (+ field overrides)."""
    parsed = parse(source) if isinstance(source, str) else source
    meta = parsed.meta
    fields_from_meta = {
        "numbering": meta.get("numbering"),
        "east_asia": meta.get("cjk_font") or meta.get("east_asia_font"),
        "latin": meta.get("latin_font"),
    }
    merged = {k: v for k, v in fields_from_meta.items() if v}
    merged.update({k: v for k, v in overrides.items() if v is not None})
    if merged:
        style = replace(style, **merged)  # type: ignore[arg-type]
    writer = DocxWriter(style, Path(base_dir or "."), parsed.is_cjk)
    return writer.render(parsed, Path(out))
