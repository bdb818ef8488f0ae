"""Word footnotes (`[^1]` in Markdown) and the document's metadata (core properties).

Footnotes are real ones (a footnotes.xml part, `w:footnoteReference` in the text), so Word and
LibreOffice number them, place them at the foot of the page and keep them there when text moves.
python-docx has no footnote API; the part is built here from the OOXML schema (separator and
continuation separator first, ids -1 and 0, as Word writes them).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import XmlPart
from docx.oxml import OxmlElement, parse_xml
from docx.oxml.ns import nsdecls, qn
from docx.shared import Pt
from docx.text.paragraph import Paragraph

FOOTNOTES_CT = "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"
_EMPTY = (
    f"<w:footnotes {nsdecls('w', 'r')}>"
    '<w:footnote w:type="separator" w:id="-1"><w:p><w:pPr><w:spacing w:after="0" w:line="240" w:lineRule="auto"/>'
    "</w:pPr><w:r><w:separator/></w:r></w:p></w:footnote>"
    '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:pPr><w:spacing w:after="0" w:line="240" '
    'w:lineRule="auto"/></w:pPr><w:r><w:continuationSeparator/></w:r></w:p></w:footnote>'
    "</w:footnotes>"
)


class _NoteParent:
    """What a python-docx Paragraph needs from its parent: the part (hyperlinks relate to it)."""

    def __init__(self, part: XmlPart) -> None:
        self.part = part


def _superscript_run(tag: str, note_id: int | None = None) -> object:
    run = OxmlElement("w:r")
    rpr = OxmlElement("w:rPr")
    va = OxmlElement("w:vertAlign")
    va.set(qn("w:val"), "superscript")
    rpr.append(va)
    run.append(rpr)
    ref = OxmlElement(tag)
    if note_id is not None:
        ref.set(qn("w:id"), str(note_id))
    run.append(ref)
    return run


class Footnotes:
    """Footnotes of one document; `reference` puts the mark in the text, `add` writes the note."""

    def __init__(self, document, size: float) -> None:
        self.document = document
        self.size = size
        self._part: XmlPart | None = None
        self.count = 0

    def _notes_part(self) -> XmlPart:
        if self._part is None:
            doc_part = self.document.part
            self._part = XmlPart(PackURI("/word/footnotes.xml"), FOOTNOTES_CT, parse_xml(_EMPTY), doc_part.package)
            doc_part.relate_to(self._part, RT.FOOTNOTES)
        return self._part

    def add(self, paragraph, write_text) -> int:
        """A footnote referenced at the end of `paragraph`; `write_text(note_paragraph)` fills it."""
        part = self._notes_part()
        self.count += 1
        note_id = self.count
        paragraph._p.append(_superscript_run("w:footnoteReference", note_id))
        note = OxmlElement("w:footnote")
        note.set(qn("w:id"), str(note_id))
        p = OxmlElement("w:p")
        note.append(p)
        part.element.append(note)
        para = Paragraph(p, _NoteParent(part))
        pf = para.paragraph_format
        pf.first_line_indent = Pt(0)
        pf.space_after = Pt(0)
        pf.line_spacing = 1.0
        p.append(_superscript_run("w:footnoteRef"))
        para.add_run("\u00a0")
        write_text(para)
        for run in para.runs:
            run.font.size = Pt(max(self.size - 1.5, 8))
        return note_id


def person_names(byline: str) -> str:
    """The author field of the file's properties: the names from a byline, without the affiliation
    ("张三（某某大学材料学院）" -> "张三", "Jane Doe (MIT), Li Si" -> "Jane Doe, Li Si")."""
    names = re.sub(r"\s*[（(][^）)]*[）)]", "", byline)
    return " ".join(names.split()).strip(" ,，、")


def set_metadata(document, meta: dict[str, str], title: str, cjk: bool) -> None:
    """Core properties from the frontmatter: title, author, subject, keywords, language, dates.
    The template's author ("python-docx") never survives: no author given means an empty one."""
    props = document.core_properties
    props.title = title[:255]
    author = person_names(meta.get("author", ""))
    props.author = author[:255]
    props.last_modified_by = author[:255]
    props.subject = meta.get("subject", meta.get("subtitle", ""))[:255]
    props.keywords = meta.get("keywords", "")[:255]
    props.comments = meta.get("description", meta.get("abstract", ""))[:255]
    props.category = meta.get("category", "")[:255]
    props.language = meta.get("lang") or ("zh-CN" if cjk else "en-US")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    props.created = now
    props.modified = now
    props.revision = 1
