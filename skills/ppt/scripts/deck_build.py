#!/usr/bin/env python3
"""The deck under construction (python-pptx): layouts, geometry, text and the shared parts of
every slide (title, slide-number field, notes). The slide kinds are in deck_slides.py and
deck_visuals.py; outline_to_deck.py drives them.

Two modes. With a theme (the default) the builder owns the look: the theme is written into the
master, the layouts get the theme's geometry and every slide uses the same grid. With the
user's template (`--template`) the template owns the look: layouts are found by their type
(so Chinese layout names work), placeholders keep the template's positions, fonts and colours,
and only what the template has no placeholder for (tables, charts, cards) is drawn, in the
template's colours.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from lxml import etree
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.shapes import MSO_SHAPE, PP_PLACEHOLDER
from pptx.enum.text import MSO_ANCHOR, PP_ALIGN
from pptx.oxml.ns import qn
from pptx.util import Emu, Inches, Pt

import deck_measure as dm
import deck_themes
import deck_typeset as typeset
from deck_rules import contrast, legible
from deck_themes import Theme

INSET_LR, INSET_TB = 91440, 45720


def _load_formulas():
    """The rendering layer's formula rule (stdlib only, loaded by path: the sandbox mount, or the
    source tree next to the skills); None when neither exists."""
    here = Path(__file__).resolve()
    for cand in (os.environ.get("ZCBOT_RENDERING_DIR"), "/sandbox/rendering",
                 str(here.parents[3] / "libs" / "zcbot_core" / "zcbot_core" / "rendering")):
        path = Path(cand) / "formulas.py" if cand else None
        if path is not None and path.is_file():
            spec = importlib.util.spec_from_file_location("zcbot_formulas", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    return None


FORMULAS = _load_formulas()
BULLET_KINDS = ("a:buNone", "a:buAutoNum", "a:buChar", "a:buBlip")
# Layout types (p:sldLayout/@type) per role, then the English names of the default template.
ROLES = {
    "title": (("title",), ("Title Slide",)),
    "section": (("secHead",), ("Section Header",)),
    "content": (("obj", "tx"), ("Title and Content",)),
    "two": (("twoObj", "twoTxTwoObj"), ("Two Content",)),
    "title_only": (("titleOnly",), ("Title Only",)),
    "blank": (("blank",), ("Blank",)),
}


def rgb(hex_colour: str) -> RGBColor:
    return RGBColor.from_string(hex_colour)


def set_bullet(ppr, tag: str, attrs: dict | None = None) -> None:
    """Replace the paragraph's bullet kind, keeping DrawingML's child order."""
    for kind in BULLET_KINDS:
        for old in ppr.findall(qn(kind)):
            ppr.remove(old)
    ppr.insert_element_before(ppr.makeelement(qn(tag), attrs or {}), "a:tabLst", "a:defRPr", "a:extLst")


class Deck:
    def __init__(self, theme: Theme | None, template: Path | None, size: str, lang: str) -> None:
        self.lang = lang
        self.zh = lang.startswith("zh")
        if template:
            self.prs = Presentation(str(template))
            ids = self.prs.slides._sldIdLst
            for sld in list(ids):
                self.prs.part.drop_rel(sld.rId)
                ids.remove(sld)
            self.theme = deck_themes.template_theme(self.prs)
        else:
            self.prs = Presentation()
            if size == "16:9":
                self._widen(Inches(13.333))
            self.theme = theme or deck_themes.resolve(None)
            deck_themes.apply_theme(self.prs, self.theme, lang)
        self.templated = bool(template)
        grounds = (self.theme.background, self.theme.surface)
        self._ink = {c: legible(c, grounds) for c in self.theme.palette}
        self.last_title_size = 99.0
        self.W, self.H = int(self.prs.slide_width), int(self.prs.slide_height)
        self.M = int(self.W * 0.045)
        self.title_rect = (self.M, int(self.H * 0.05), self.W - 2 * self.M, int(self.H * 0.125))
        self.body_rect = (self.M, int(self.H * 0.215), self.W - 2 * self.M, int(self.H * 0.69))
        self.layouts = {}
        for layout in self.prs.slide_layouts:
            self.layouts.setdefault(layout._element.get("type"), layout)
            self.layouts.setdefault(layout.name, layout)
        if self.templated:
            from deck_read import _master_sizes  # the template's own text sizes

            sizes = _master_sizes(self.prs)
            self.tpl_title, self.tpl_body = sizes["title"][0], sizes["body"][0]
            self._template_geometry()
        else:
            self._layout_geometry()

    def ink(self, colour: str) -> str:
        """A palette colour as text colour: darkened where it would not read on the slide or a card."""
        return self._ink.get(colour) or legible(colour, (self.theme.background, self.theme.surface))

    def on(self, fill: str) -> str:
        """Text colour on a filled shape: white, or the text colour when white would not read."""
        return "FFFFFF" if contrast("FFFFFF", fill) >= 3.0 else self.theme.text

    # -- geometry ------------------------------------------------------------------------------
    @property
    def body_top(self) -> int:
        return self.body_rect[1]

    @property
    def body_bottom(self) -> int:
        return self.body_rect[1] + self.body_rect[3]

    @property
    def body_w(self) -> int:
        return self.body_rect[2]

    @property
    def body_h(self) -> int:
        return self.body_rect[3]

    def _widen(self, width: int) -> None:
        """The default template is 4:3; scale its layouts and master horizontally."""
        sx = width / self.prs.slide_width
        self.prs.slide_width = width
        for layout in self.prs.slide_layouts:
            for shape in layout.placeholders:
                if shape._element.spPr.find(qn("a:xfrm")) is not None:
                    shape.left, shape.width = int(shape.left * sx), int(shape.width * sx)
        for shape in self.prs.slide_master.shapes:
            shape.left, shape.width = int(shape.left * sx), int(shape.width * sx)

    def _layout_geometry(self) -> None:
        """The theme's grid in the master and layouts, so slides added by hand match."""
        foot_y, foot_h = int(self.H * 0.925), int(self.H * 0.05)
        for holder in [self.prs.slide_master, *self.prs.slide_layouts]:
            kind = holder._element.get("type") if holder is not self.prs.slide_master else "master"
            bodies = []
            for ph in holder.placeholders:
                t = ph.placeholder_format.type
                if t == PP_PLACEHOLDER.TITLE and kind not in ("secHead",):
                    self.place(ph, *self.title_rect)
                elif t == PP_PLACEHOLDER.SLIDE_NUMBER:
                    self.place(ph, self.W - self.M - Inches(1.2), foot_y, Inches(1.2), foot_h)
                elif t in (PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.DATE):
                    ph._element.getparent().remove(ph._element)
                elif t in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT) and kind in ("master", "obj", "twoObj"):
                    bodies.append(ph)
            if len(bodies) == 1:
                self.place(bodies[0], *self.body_rect)
            elif len(bodies) == 2:
                gap = int(self.W * 0.03)
                w = (self.body_w - gap) // 2
                for i, ph in enumerate(sorted(bodies, key=lambda p: p.left)):
                    self.place(ph, self.M + i * (w + gap), self.body_top, w, self.body_h)

    def _template_geometry(self) -> None:
        """Title and body areas come from the template's content layout."""
        layout = self.layout("content")
        for ph in layout.placeholders:
            t = ph.placeholder_format.type
            rect = (int(ph.left), int(ph.top), int(ph.width), int(ph.height)) if ph.width else None
            if rect and t == PP_PLACEHOLDER.TITLE:
                self.title_rect = rect
            elif rect and t in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT):
                self.body_rect = rect
        self.M = self.body_rect[0]

    def layout(self, *roles: str):
        for role in roles:
            types, names = ROLES[role]
            for key in (*types, *names):
                if key in self.layouts:
                    return self.layouts[key]
        return self.prs.slide_layouts[min(6, len(self.prs.slide_layouts) - 1)]

    def place(self, shape, x: int, y: int, w: int, h: int) -> None:
        shape.left, shape.top, shape.width, shape.height = Emu(x), Emu(y), Emu(w), Emu(h)

    def new_slide(self, *roles: str):
        return self.prs.slides.add_slide(self.layout(*roles))

    def titled(self, s: dict):
        """A Title Only slide with its title set: the base of every drawn (non-placeholder) kind."""
        slide = self.new_slide("title_only", "content")
        title = self.add_title(slide, s["title"])
        self.drop_unused(slide, [title])
        return slide

    def columns(self, n: int, gap_share: float) -> tuple[int, int]:
        """(column width, gap) for n equal columns across the body."""
        gap = int(self.W * gap_share)
        return (self.body_w - gap * (n - 1)) // n, gap

    def placeholder(self, slide, *types):
        for ph in slide.placeholders:
            if ph.placeholder_format.type in types:
                return ph
        return None

    def bodies(self, slide) -> list:
        found = [p for p in slide.placeholders
                 if p.placeholder_format.type in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT, PP_PLACEHOLDER.SUBTITLE)]
        return sorted(found, key=lambda p: (int(p.left or 0), int(p.top or 0)))

    def drop_unused(self, slide, keep: list) -> None:
        kept = {id(k._element) for k in keep if k is not None}
        for ph in list(slide.placeholders):
            if id(ph._element) not in kept and ph.placeholder_format.type != PP_PLACEHOLDER.SLIDE_NUMBER:
                ph._element.getparent().remove(ph._element)

    # -- text ----------------------------------------------------------------------------------
    def fam(self, bold: bool = False, heading: bool = False) -> str:
        return dm.family(self.theme.head_latin if heading else self.theme.latin, bold)

    def style_run(self, run, size: float | None, bold: bool | None = None, colour: str | None = None,
                  heading: bool = False) -> None:
        if size is not None:
            run.font.size = Pt(size)
        if bold is not None:
            run.font.bold = bold
        rpr = run._r.get_or_add_rPr()
        rpr.set("lang", self.lang)
        if not self.templated:  # with a template its fonts apply through the master
            run.font.name = self.theme.head_latin if heading else self.theme.latin
            ea = rpr.find(qn("a:ea"))
            if ea is None:
                ea = rpr.makeelement(qn("a:ea"), {})
                rpr.insert_element_before(ea, "a:cs", "a:sym", "a:hlinkClick", "a:hlinkMouseOver", "a:rtl", "a:extLst")
            ea.set("typeface", self.theme.head_ea if heading else self.theme.ea)
        if colour is not None:
            run.font.color.rgb = rgb(colour)

    def set_text(self, shape, paragraphs: list[tuple[str, int]], size: float | None, *, bold: bool | None = None,
                 colour: str | None = None, align=None, bullets: bool | str = True, heading: bool = False,
                 space: float = 0.0) -> None:
        """bullets: True = the placeholder's own bullets, "manual" = bullet characters on a text
        box, False = plain paragraphs. `space` = points before every paragraph but the first."""
        tf = shape.text_frame
        tf.word_wrap = True
        for idx, (text, level) in enumerate(paragraphs):
            p = tf.paragraphs[0] if idx == 0 else tf.add_paragraph()
            p.text = ""
            p.level = level if bullets else 0
            if align is not None:
                p.alignment = align
            if bullets == "manual":
                ppr = p._p.get_or_add_pPr()
                ppr.set("marL", str(int(285750 + 342900 * level)))
                ppr.set("indent", "-285750")
                set_bullet(ppr, "a:buChar", {"char": "•" if level == 0 else "–"})
            elif not bullets:
                ppr = p._p.get_or_add_pPr()
                ppr.set("marL", "0")
                ppr.set("indent", "0")
                set_bullet(ppr, "a:buNone")
            if idx and space:
                p.space_before = Pt(space)
            self.add_runs(p, text, None if size is None else self.level_size(size, level), bold=bold, colour=colour,
                          heading=heading)
        self.no_orphans(shape, heading)

    def no_orphans(self, shape, heading: bool = False) -> None:
        typeset.no_orphans(shape, lambda bold: self.fam(bold, heading), heading)

    def add_runs(self, p, text: str, size: float | None, **style) -> None:
        """One run per piece: chemical formulas get real subscripts (Li6PS5Cl -> Li₆PS₅Cl), by the
        rendering layer's rule, shared with the documents."""
        text = dm.glue(text)
        pieces = FORMULAS.split_formulas(text) if FORMULAS is not None else [(text, "")]
        for piece, kind in pieces:
            run = p.add_run()
            run.text = piece
            self.style_run(run, size, **style)
            if kind:
                run._r.get_or_add_rPr().set("baseline", "-25000" if kind == "sub" else "30000")

    @staticmethod
    def level_size(size: float, level: int) -> float:
        return max(12.0, size - 2 * level)

    def need(self, paragraphs: list[tuple[str, int]], width: int, size: float, placeholder: bool,
             space: float | None = None, bold: bool = False, heading: bool = False) -> int:
        paras = []
        fam = self.fam(bold, heading)
        for text, level in paragraphs:
            s = self.level_size(size, level)
            margin = int((0.375 + 0.42 * level) * 914400) if placeholder else 0
            before = space if space is not None else (s * 0.2 if placeholder else 0.0)
            paras.append((text, s, margin, before, fam))
        return dm.text_height(paras, width - 2 * INSET_LR) + 2 * INSET_TB

    def fit(self, paragraphs, width: int, height: int, sizes, placeholder: bool, **kw) -> float | None:
        """The largest size that fits, or None when even the smallest does not."""
        for size in sizes:
            if self.need(paragraphs, width, size, placeholder, **kw) <= height * 0.97:
                return size
        return None

    def title_sizes(self) -> tuple[float, ...]:
        """Titles shrink to fit, but never below the body size (hierarchy stays right side up)."""
        top = self.tpl_title if self.templated else self.theme.title_size
        floor = max(self.theme.body_size + 2, 22)
        return tuple(s for s in (top, top - 2, top - 4, top - 6, top - 8, top - 10, top - 12) if s >= floor) or (floor,)

    def own_size(self, size: float, template_size: float) -> float | None:
        """With a template, a size is written only when the template's own does not fit."""
        if not self.templated:
            return size
        return size if size < template_size else None

    def add_title(self, slide, title: str):
        ph = slide.shapes.title
        if ph is None:
            ph = slide.shapes.add_textbox(*self.title_rect)
            ph.name = "Title"
        elif not self.templated:
            self.place(ph, *self.title_rect)
        x, y, w, h = self.title_rect
        size = self.fit([(title, 0)], w, h, self.title_sizes(), False, bold=True, heading=True) or self.title_sizes()[-1]
        self.last_title_size = size  # the body on this slide stays smaller than this
        self.set_text(ph, [(title, 0)], self.own_size(size, getattr(self, "tpl_title", 0)),
                      bold=None if self.templated else self.theme.heading_bold,
                      colour=None if self.templated else self.theme.title, align=PP_ALIGN.LEFT, bullets=False, heading=True)
        ph.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
        if self.theme.title_rule != "none":
            full = self.theme.title_rule == "full"
            rx = x if full else x + INSET_LR  # aligned with the title's text, not its box
            rw = w if full else Inches(1.1)
            self.rect(slide, rx, y + h + Inches(0.04), rw, Inches(0.04 if not full else 0.015),
                      self.theme.accent if not full else self.theme.muted, "Title Rule")
        return ph

    def rect(self, slide, x, y, w, h, colour: str, name: str, shape=MSO_SHAPE.RECTANGLE):
        box = slide.shapes.add_shape(shape, int(x), int(y), int(w), int(h))
        box.fill.solid()
        box.fill.fore_color.rgb = rgb(colour)
        box.line.fill.background()
        box.shadow.inherit = False
        box.name = name
        return box

    def textbox(self, slide, x, y, w, h, paragraphs, size, name: str, **kw):
        box = slide.shapes.add_textbox(int(x), int(y), int(w), int(h))
        box.name = name
        self.set_text(box, paragraphs, size, bullets=kw.pop("bullets", False), **kw)
        return box

    def add_number(self, slide) -> None:
        """A real slide-number field (stays right after reordering), in the layout's placeholder
        position when there is one."""
        layout_ph = next((p for p in slide.slide_layout.placeholders
                          if p.placeholder_format.type == PP_PLACEHOLDER.SLIDE_NUMBER), None)
        if layout_ph is not None:
            idx = layout_ph.placeholder_format.idx
            sp = etree.fromstring(
                f'<p:sp xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
                f'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><p:nvSpPr>'
                f'<p:cNvPr id="{9000 + len(slide.shapes)}" name="Slide Number"/><p:cNvSpPr><a:spLocks noGrp="1"/></p:cNvSpPr>'
                f'<p:nvPr><p:ph type="sldNum" sz="quarter" idx="{idx}"/></p:nvPr></p:nvSpPr><p:spPr/>'
                f'<p:txBody><a:bodyPr/><a:lstStyle/><a:p><a:pPr algn="r"/></a:p></p:txBody></p:sp>')
            slide.shapes._spTree.append(sp)
            para = sp.find(f".//{qn('a:p')}")
        else:
            box = slide.shapes.add_textbox(self.W - self.M - Inches(1.2), int(self.H * 0.925), Inches(1.2), int(self.H * 0.05))
            box.name = "Slide Number"
            para = box.text_frame.paragraphs[0]._p
            para.get_or_add_pPr().set("algn", "r")
        fld = etree.SubElement(para, qn("a:fld"), id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum")
        rpr = etree.SubElement(fld, qn("a:rPr"), lang=self.lang, sz="1100")
        if not self.templated:
            fill = etree.SubElement(rpr, qn("a:solidFill"))
            etree.SubElement(fill, qn("a:srgbClr"), val=self.theme.muted)
        etree.SubElement(fld, qn("a:t")).text = "‹#›"

    def notes(self, slide, text: str | None) -> None:
        if text:
            slide.notes_slide.notes_text_frame.text = str(text)

    def save(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=str(out.parent))
        os.close(fd)
        try:
            self.prs.save(tmp)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; the deck gets normal permissions
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
