"""A corpus of branded templates, made by code the way real company templates are built: dark
cover and section layouts with white titles (through the layout placeholder's list style, a
colour-map override, or a full-bleed shape on the layout), light covers with brand-coloured
titles from the master's title style, placeholders moved away from the default grid, a body
list style whose untouched level 2 is larger than level 1, and a 4:3 slide.

`TEMPLATES` maps a name to its builder; `build_templates(folder)` writes them all. The clean
fixture outlines built on any of them must check without a false error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lxml import etree
from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE, PP_PLACEHOLDER
from pptx.opc.constants import RELATIONSHIP_TYPE as RT
from pptx.oxml.ns import qn
from pptx.util import Inches

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
NAVY, GOLD, TEAL = "1B2A4A", "C9A227", "0E7C7B"


def _new(wide: bool = True):
    prs = Presentation()
    if wide:  # the default template is 4:3: scale its layouts like PowerPoint's 16:9 does
        sx = Inches(13.333) / prs.slide_width
        prs.slide_width = Inches(13.333)
        for holder in [prs.slide_master, *prs.slide_layouts]:
            for shape in holder.placeholders:
                if shape._element.spPr.find(qn("a:xfrm")) is not None:
                    shape.left, shape.width = int(shape.left * sx), int(shape.width * sx)
    return prs


def _layout(prs, kind: str):
    return next(lay for lay in prs.slide_layouts if lay._element.get("type") == kind)


def _theme(prs, accent: str, dk2: str, latin: str = "Arial", ea: str = "Microsoft YaHei") -> None:
    part = prs.slide_master.part.part_related_by(RT.THEME)
    root = etree.fromstring(part.blob)
    for key, val in (("accent1", accent), ("dk2", dk2)):
        slot = root.find(f".//{{{A}}}clrScheme/{{{A}}}{key}")
        for child in list(slot):
            slot.remove(child)
        etree.SubElement(slot, f"{{{A}}}srgbClr", val=val)
    for tag in ("majorFont", "minorFont"):
        root.find(f".//{{{A}}}{tag}/{{{A}}}latin").set("typeface", latin)
        root.find(f".//{{{A}}}{tag}/{{{A}}}ea").set("typeface", ea)
    part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)


def _bg(holder, colour: str | None = None, scheme: str | None = None) -> None:
    csld = holder._element.find(qn("p:cSld"))
    old = csld.find(qn("p:bg"))
    if old is not None:
        csld.remove(old)
    bg = etree.Element(qn("p:bg"))
    if scheme:
        ref = etree.SubElement(bg, qn("p:bgRef"), idx="1001")
        etree.SubElement(ref, qn("a:schemeClr"), val=scheme)
    else:
        pr = etree.SubElement(bg, qn("p:bgPr"))
        fill = etree.SubElement(pr, qn("a:solidFill"))
        etree.SubElement(fill, qn("a:srgbClr"), val=colour)
        etree.SubElement(pr, qn("a:effectLst"))
    csld.insert(0, bg)


def _colour_el(parent, colour: str):
    fill = parent.makeelement(qn("a:solidFill"), {})
    parent.insert(0, fill)  # DrawingML order: the fill before the fonts
    if colour.startswith("scheme:"):
        etree.SubElement(fill, qn("a:schemeClr"), val=colour[7:])
    else:
        etree.SubElement(fill, qn("a:srgbClr"), val=colour)


def _ph_style(ph, level: int, colour: str | None = None, size: float | None = None, bold: bool = False) -> None:
    """A layout placeholder's list style for one level: what a template designer sets."""
    body = ph._element.find(qn("p:txBody"))
    lst = body.find(qn("a:lstStyle"))
    lvl = lst.find(qn(f"a:lvl{level}pPr"))
    if lvl is None:
        lvl = etree.SubElement(lst, qn(f"a:lvl{level}pPr"))
    d = lvl.find(qn("a:defRPr"))
    if d is None:
        d = etree.SubElement(lvl, qn("a:defRPr"))
    if size:
        d.set("sz", str(int(size * 100)))
    if bold:
        d.set("b", "1")
    if colour:
        for fill in d.findall(qn("a:solidFill")):
            d.remove(fill)
        _colour_el(d, colour)


def _master_style(prs, style: str, level: int, colour: str | None = None, size: float | None = None) -> None:
    tx = prs.slide_master._element.find(qn("p:txStyles")).find(qn(f"p:{style}"))
    d = tx.find(f"{qn(f'a:lvl{level}pPr')}/{qn('a:defRPr')}")
    if size:
        d.set("sz", str(int(size * 100)))
    if colour:
        for old in d.findall(qn("a:solidFill")):
            d.remove(old)
        fill = d.makeelement(qn("a:solidFill"), {})
        d.insert(0, fill)
        etree.SubElement(fill, qn("a:srgbClr"), val=colour)


def _placeholder(holder, *types):
    return next((p for p in holder.placeholders if p.placeholder_format.type in types), None)


def _move(holder, types, x, y, w, h) -> None:
    ph = _placeholder(holder, *types)
    ph.left, ph.top, ph.width, ph.height = Inches(x), Inches(y), Inches(w), Inches(h)


def _bar(holder, prs, colour: str, y: float = 0.0, h: float = 0.12, name: str = "Brand Bar", w=None) -> None:
    """A brand shape drawn on a master or layout (not a placeholder)."""
    scratch = prs.slides.add_slide(prs.slide_layouts[6])
    shape = scratch.shapes.add_shape(MSO_SHAPE.RECTANGLE, 0, Inches(y), w or prs.slide_width, Inches(h))
    shape.fill.solid()
    shape.fill.fore_color.rgb = _rgb(colour)
    shape.line.fill.background()
    shape.name = name
    tree = holder.shapes._spTree
    # behind the placeholders: right after the group properties
    tree.insert(2, shape._element)
    ids = prs.slides._sldIdLst
    prs.part.drop_rel(ids[-1].rId)
    ids.remove(ids[-1])


def _rgb(colour: str):
    from pptx.dml.color import RGBColor

    return RGBColor.from_string(colour)


def dark_cover(prs=None):
    """Navy cover and section layouts, white titles set in the layout placeholders' list style
    (the master's title colour stays dark): the case that failed the build."""
    prs = prs or _new()
    _theme(prs, TEAL, NAVY)
    for kind in ("title", "secHead"):
        lay = _layout(prs, kind)
        _bg(lay, NAVY)
        _ph_style(_placeholder(lay, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.TITLE), 1, "FFFFFF", bold=True)
        sub = _placeholder(lay, PP_PLACEHOLDER.SUBTITLE, PP_PLACEHOLDER.BODY)
        if sub is not None:
            _ph_style(sub, 1, "D0D7E2")
    _master_style(prs, "titleStyle", 1, NAVY)
    _bar(prs.slide_master, prs, TEAL)
    return prs


def clrmap_dark(prs=None):
    """Dark cover and section by a colour-map override (tx1 -> lt1, bg1 -> dk1): the text keeps
    'tx1' and renders white; the background is the scheme's bg1, i.e. dark."""
    prs = prs or _new()
    _theme(prs, GOLD, NAVY, "Georgia", "SimSun")
    for kind in ("title", "secHead"):
        lay = _layout(prs, kind)
        _bg(lay, scheme="bg1")
        ovr = lay._element.find(qn("p:clrMapOvr"))
        for child in list(ovr):
            ovr.remove(child)
        etree.SubElement(ovr, qn("a:overrideClrMapping"), bg1="dk1", tx1="lt1", bg2="dk2", tx2="lt2", accent1="accent1",
                         accent2="accent2", accent3="accent3", accent4="accent4", accent5="accent5", accent6="accent6",
                         hlink="hlink", folHlink="folHlink")
    _master_style(prs, "titleStyle", 1, None)
    return prs


def light_cover(prs=None):
    """A pale cover band and brand-coloured titles from the master's title style (light
    template: dark text everywhere)."""
    prs = prs or _new()
    _theme(prs, "B4262D", "3A3A3A")
    _bg(_layout(prs, "title"), "F4EFE6")
    _master_style(prs, "titleStyle", 1, "B4262D")
    _master_style(prs, "bodyStyle", 1, "3A3A3A")
    _bar(prs.slide_master, prs, "B4262D", y=7.3, h=0.2, name="Footer Band")
    return prs


def moved_placeholders(prs=None):
    """Title top-left and narrower, body moved right under it, section title at the bottom;
    the body (layout and master) sets level 1 to 20 pt and leaves level 2 at 28 pt."""
    prs = prs or _new()
    _theme(prs, "6A1B9A", "2D1B3D")
    content = _layout(prs, "obj")
    _move(content, (PP_PLACEHOLDER.TITLE,), 0.45, 0.3, 10.5, 1.0)
    _move(content, (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT), 0.75, 1.55, 11.6, 5.2)
    _ph_style(_placeholder(content, PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT), 1, size=20)
    _move(_layout(prs, "titleOnly"), (PP_PLACEHOLDER.TITLE,), 0.45, 0.3, 10.5, 1.0)
    _move(_layout(prs, "secHead"), (PP_PLACEHOLDER.TITLE,), 0.9, 4.3, 11.0, 1.4)
    _move(_layout(prs, "secHead"), (PP_PLACEHOLDER.BODY,), 0.9, 5.8, 11.0, 0.8)
    _master_style(prs, "titleStyle", 1, size=32)
    _master_style(prs, "bodyStyle", 1, size=20)
    _master_style(prs, "bodyStyle", 2, size=28)
    _bar(_layout(prs, "obj"), prs, "6A1B9A", y=0.0, h=0.08, w=Inches(0.3), name="Corner Mark")
    return prs


def four_three(prs=None):
    """A 4:3 template whose cover is a full-bleed dark picture-like panel drawn on the layout,
    with a white title from the layout's list style."""
    prs = prs or _new(wide=False)
    _theme(prs, "2E7D32", "1B3A1E")
    cover = _layout(prs, "title")
    _bar(cover, prs, "1B3A1E", y=0.0, h=7.5, name="Cover Panel")
    _ph_style(_placeholder(cover, PP_PLACEHOLDER.CENTER_TITLE), 1, "FFFFFF")
    _ph_style(_placeholder(cover, PP_PLACEHOLDER.SUBTITLE), 1, "scheme:bg1")
    _master_style(prs, "titleStyle", 1, size=36)
    return prs


TEMPLATES: dict[str, Callable] = {
    "dark_cover": dark_cover, "clrmap_dark": clrmap_dark, "light_cover": light_cover,
    "moved_placeholders": moved_placeholders, "four_three": four_three,
}


def build_templates(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, make in TEMPLATES.items():
        path = folder / f"tpl-{name}.pptx"
        make().save(str(path))
        out[name] = path
    return out

