"""Word-native lists: numbering definitions in numbering.xml, paragraphs that point at them.

Typed "•" / "1." prefixes look right until someone edits the list in Word: the numbers do not
renumber, the hanging indent is fake, and "Bullets and Numbering" does not recognise the list. Here
every Markdown list becomes real numbering: one bullet definition and one ordered definition per
document (abstractNum), and a fresh `w:num` (with start overrides) for each ordered list, so every
list starts at 1 while Word still treats its items as one list.
"""

from __future__ import annotations

from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Pt

BULLETS = ("•", "–", "▪")
ORDERED_TEXT = ("%1.", "(%2)", "%3)")
LEVELS = 3


def _el(tag: str, **attrs: str) -> object:
    el = OxmlElement(tag)
    for key, value in attrs.items():
        el.set(qn(f"w:{key}"), value)
    return el


class ListNumbering:
    """Numbering definitions for one document, indents sized to its body text."""

    def __init__(self, document, size: float, latin: str, first_indent_chars: float = 2.0) -> None:
        self.numbering = document.part.numbering_part.element
        self.size = size
        self.latin = latin
        self.first_indent_chars = first_indent_chars
        self._bullet_abstract = self._add_abstract(ordered=False)
        self._ordered_abstract = self._add_abstract(ordered=True)
        self._bullet_num = self._add_num(self._bullet_abstract, restart=False)

    def _ids(self, tag: str, attr: str) -> list[int]:
        return [int(el.get(qn(attr))) for el in self.numbering.findall(qn(tag))]

    def _indent(self, level: int) -> tuple[int, int]:
        """(left, hanging) in twips: the marker sits at the body's paragraph indent, the text after it."""
        hanging = int(self.size * 1.6 * 20)
        left = int(self.size * (self.first_indent_chars + 1.6 * (level + 1)) * 20)
        return left, hanging

    def _add_abstract(self, ordered: bool) -> int:
        abstract_id = max(self._ids("w:abstractNum", "w:abstractNumId"), default=-1) + 1
        abstract = _el("w:abstractNum", abstractNumId=str(abstract_id))
        abstract.append(_el("w:multiLevelType", val="hybridMultilevel"))
        for level in range(LEVELS):
            lvl = _el("w:lvl", ilvl=str(level))
            lvl.append(_el("w:start", val="1"))
            lvl.append(_el("w:numFmt", val="decimal" if ordered else "bullet"))
            lvl.append(_el("w:lvlText", val=ORDERED_TEXT[level] if ordered else BULLETS[level]))
            lvl.append(_el("w:lvlJc", val="left"))
            ppr = _el("w:pPr")
            left, hanging = self._indent(level)
            ppr.append(_el("w:ind", left=str(left), hanging=str(hanging)))
            lvl.append(ppr)
            rpr = _el("w:rPr")
            rpr.append(_el("w:rFonts", ascii=self.latin, hAnsi=self.latin, cs=self.latin, hint="default"))
            lvl.append(rpr)
            abstract.append(lvl)
        # Schema order: every abstractNum before the first num.
        first_num = self.numbering.find(qn("w:num"))
        if first_num is not None:
            first_num.addprevious(abstract)
        else:
            self.numbering.append(abstract)
        return abstract_id

    def _add_num(self, abstract_id: int, restart: bool) -> int:
        num_id = max(self._ids("w:num", "w:numId"), default=0) + 1
        num = _el("w:num", numId=str(num_id))
        num.append(_el("w:abstractNumId", val=str(abstract_id)))
        if restart:
            for level in range(LEVELS):
                override = _el("w:lvlOverride", ilvl=str(level))
                override.append(_el("w:startOverride", val="1"))
                num.append(override)
        self.numbering.append(num)
        return num_id

    def new_list(self) -> "ListState":
        return ListState(self)

    def apply(self, paragraph, num_id: int, level: int) -> None:
        ppr = paragraph._p.get_or_add_pPr()
        num_pr = ppr.get_or_add_numPr()
        num_pr.get_or_add_ilvl().val = level
        num_pr.get_or_add_numId().val = num_id
        pf = paragraph.paragraph_format
        left, hanging = self._indent(level)
        pf.left_indent = Pt(left / 20)
        pf.first_line_indent = Pt(-hanging / 20)


class ListState:
    """One Markdown list: ordered runs at a level restart at 1 after a shallower item or a bullet."""

    def __init__(self, numbering: ListNumbering) -> None:
        self.numbering = numbering
        self.active: dict[int, int] = {}

    def num_for(self, level: int, ordered: bool) -> int:
        level = min(level, LEVELS - 1)
        for deeper in [lvl for lvl in self.active if lvl > level]:
            del self.active[deeper]
        if not ordered:
            self.active.pop(level, None)
            return self.numbering._bullet_num
        if level not in self.active:
            self.active[level] = self.numbering._add_num(self.numbering._ordered_abstract, restart=True)
        return self.active[level]

    def add(self, paragraph, level: int, ordered: bool) -> None:
        level = min(level, LEVELS - 1)
        self.numbering.apply(paragraph, self.num_for(level, ordered), level)


# ---- heading numbers (typed labels: 一、/（一）/1. are part of the heading text by convention) ----

CN_NUM = "零一二三四五六七八九十"


def chinese_number(n: int) -> str:
    if n <= 10:
        return CN_NUM[n]
    if n < 20:
        return "十" + (CN_NUM[n % 10] if n % 10 else "")
    return CN_NUM[n // 10] + "十" + (CN_NUM[n % 10] if n % 10 else "")


class Numberer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.counts = [0] * 7

    def label(self, level: int) -> str:
        self.counts[level] += 1
        for deeper in range(level + 1, 7):
            self.counts[deeper] = 0
        if self.mode == "decimal":
            return ".".join(str(self.counts[i]) for i in range(1, level + 1)) + " "
        if self.mode == "chinese":
            n = self.counts[level]
            return {1: f"{chinese_number(n)}、", 2: f"（{chinese_number(n)}）", 3: f"{n}. ", 4: f"（{n}）"}.get(level, "")
        if self.mode == "nsfc":  # the NSFC 报告正文 outline: （一）立项依据与研究内容 / 1．项目的立项依据 / （1）
            n = self.counts[level]
            circled = chr(0x2460 + n - 1) if 1 <= n <= 20 else f"{n})"
            return {1: f"（{chinese_number(n)}）", 2: f"{n}．", 3: f"（{n}）", 4: circled}.get(level, "")
        return ""
