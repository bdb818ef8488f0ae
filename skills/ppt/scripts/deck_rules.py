#!/usr/bin/env python3
"""What check_deck.py needs to know about a deck beyond geometry (python-pptx + stdlib):
shapes in slide coordinates (groups included), resolved font sizes and families, colours and
backgrounds for contrast, and chart label crowding.
"""

from __future__ import annotations

from lxml import etree
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER
from pptx.opc.constants import RELATIONSHIP_TYPE as RT
from pptx.oxml.ns import qn

import deck_inherit as inh
import deck_measure as dm

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
TITLE_TYPES = (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE)
BODY_TYPES = (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)


# ---- shapes in slide coordinates ------------------------------------------------------------

def walk(shapes, transform=None):
    """(shape, (x, y, w, h) in slide EMU) for every leaf shape; a group's children are mapped
    through the group's child offset/extent, so a moved or scaled group is checked where it shows."""
    for shape in shapes:
        rect = _rect(shape)
        if rect is not None and transform is not None:
            rect = transform(rect)
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            xfrm = shape._element.grpSpPr.find(qn("a:xfrm"))
            inner = transform
            if xfrm is not None and rect is not None:
                ch_off, ch_ext = xfrm.find(qn("a:chOff")), xfrm.find(qn("a:chExt"))
                cx0 = int(ch_off.get("x")) if ch_off is not None else 0
                cy0 = int(ch_off.get("y")) if ch_off is not None else 0
                cw = int(ch_ext.get("cx")) if ch_ext is not None and int(ch_ext.get("cx")) else rect[2] or 1
                chh = int(ch_ext.get("cy")) if ch_ext is not None and int(ch_ext.get("cy")) else rect[3] or 1
                gx, gy, gw, gh = rect
                sx, sy = (gw / cw) if cw else 1.0, (gh / chh) if chh else 1.0

                def inner(r, gx=gx, gy=gy, sx=sx, sy=sy, cx0=cx0, cy0=cy0):
                    return (int(gx + (r[0] - cx0) * sx), int(gy + (r[1] - cy0) * sy), int(r[2] * sx), int(r[3] * sy))
            yield from walk(shape.shapes, inner)
        else:
            yield shape, rect


def _rect(shape):
    try:
        if shape.left is None or shape.top is None or shape.width is None or shape.height is None:
            return None
        return int(shape.left), int(shape.top), int(shape.width), int(shape.height)
    except Exception:  # noqa: BLE001 - shapes without a position
        return None


def ph_type(shape):
    if not shape.is_placeholder:
        return None
    try:
        return shape.placeholder_format.type
    except Exception:  # noqa: BLE001
        return None


def is_title(shape) -> bool:
    return ph_type(shape) in TITLE_TYPES


# ---- theme: fonts and colours ----------------------------------------------------------------

class ThemeInfo:
    def __init__(self, prs) -> None:
        self.colours = {"dk1": "000000", "lt1": "FFFFFF", "dk2": "44546A", "lt2": "E7E6E6"}
        self.minor, self.major = "Calibri", "Calibri"
        try:
            root = etree.fromstring(prs.slide_master.part.part_related_by(RT.THEME).blob)
            scheme = root.find(f".//{{{A}}}clrScheme")
            for slot in scheme:
                key = etree.QName(slot).localname
                if len(slot):
                    el = slot[0]
                    self.colours[key] = (el.get("val") if el.tag.endswith("srgbClr") else el.get("lastClr")) or "000000"
            minor = root.find(f".//{{{A}}}minorFont/{{{A}}}latin")
            major = root.find(f".//{{{A}}}majorFont/{{{A}}}latin")
            self.minor = minor.get("typeface") if minor is not None else self.minor
            self.major = major.get("typeface") if major is not None else self.major
        except Exception:  # noqa: BLE001 - a deck without a readable theme: defaults
            pass
        aliases = {"tx1": "dk1", "bg1": "lt1", "tx2": "dk2", "bg2": "lt2"}
        for alias, key in aliases.items():
            self.colours[alias] = self.colours.get(key, "000000")

    def colour(self, el, cmap: dict[str, str] | None = None) -> str | None:
        """The hex colour of a fill/colour element (srgbClr, schemeClr through the slide's colour
        map, with its modifiers), or None."""
        return inh.resolve_colour(el, self.colours, cmap)

    def font(self, name: str | None, heading: bool) -> str:
        if not name or name.startswith("+"):
            return self.major if (heading or name == "+mj-lt") else self.minor
        return name


def text_colour(shape, theme: ThemeInfo, cmap: dict[str, str] | None = None) -> str:
    """The colour most of the shape's text is drawn in, resolved through the run, the shape's,
    the layout's and the master's list styles and the colour map (deck_inherit)."""
    cmap = cmap or dict(inh.DEFAULT_MAP)
    counts: dict[str, int] = {}
    for colour, n in inh.run_colours(shape, theme.colours, cmap):
        counts[colour] = counts.get(colour, 0) + n
    if not counts:
        return theme.colours.get(cmap.get("tx1", "dk1"), "000000")
    return max(counts, key=lambda c: counts[c])


def own_fill(shape, theme: ThemeInfo, cmap: dict[str, str] | None = None) -> str | None:
    sppr = shape._element.find(qn("p:spPr"))
    if sppr is None:
        return None
    fill = sppr.find(qn("a:solidFill"))
    if fill is not None:
        return theme.colour(fill, cmap)
    grad = sppr.find(qn("a:gradFill"))
    if grad is not None:
        return _gradient(grad, theme, cmap)
    style = shape._element.find(qn("p:style"))
    if style is not None and sppr.find(qn("a:noFill")) is None and shape.shape_type == MSO_SHAPE_TYPE.AUTO_SHAPE:
        ref = style.find(qn("a:fillRef"))
        if ref is not None and ref.get("idx") not in ("0", None):
            return theme.colour(ref, cmap)
    return None


def _gradient(grad, theme: ThemeInfo, cmap) -> str | None:
    """A gradient judged by the mean of its stops (text on it sits on some blend of them)."""
    stops = [theme.colour(gs, cmap) for gs in grad.iter(qn("a:gs"))]
    stops = [c for c in stops if c]
    if not stops:
        return None
    chans = [sum(int(c[i:i + 2], 16) for c in stops) // len(stops) for i in (0, 2, 4)]
    return "".join(f"{v:02X}" for v in chans)


def background(slide, theme: ThemeInfo, cmap: dict[str, str] | None = None) -> str | None:
    """The slide's background colour (slide, else layout, else master); None for a picture
    background, whose colour behind the text is unknown (not judged)."""
    cmap = cmap or inh.colour_map(slide)
    for holder in (slide, slide.slide_layout, slide.slide_layout.slide_master):
        bg = holder._element.find(f"{qn('p:cSld')}/{qn('p:bg')}")
        if bg is None:
            continue
        pr = bg.find(qn("p:bgPr"))
        if pr is not None:
            if pr.find(qn("a:solidFill")) is not None:
                return theme.colour(pr.find(qn("a:solidFill")), cmap) or "FFFFFF"
            if pr.find(qn("a:gradFill")) is not None:
                return _gradient(pr.find(qn("a:gradFill")), theme, cmap)
            return None  # a picture or pattern
        ref = bg.find(qn("p:bgRef"))
        if ref is not None:
            return theme.colour(ref, cmap) or "FFFFFF"
        return None
    return theme.colours.get(cmap.get("bg1", "lt1"), "FFFFFF")


def backdrop(slide, theme: ThemeInfo, cmap: dict[str, str]) -> list[tuple[tuple[int, int, int, int], str | None]]:
    """Filled shapes the master and the layout draw under the slide's content (a brand band, a
    full-bleed cover panel), bottom first; a picture's colour is unknown (None: not judged)."""
    out: list = []
    layout = slide.slide_layout
    holders = [layout]
    if layout._element.get("showMasterSp") not in ("0", "false"):
        holders.insert(0, layout.slide_master)
    for holder in holders:
        for shape in holder.shapes:
            if shape.is_placeholder:
                continue
            rect = _rect(shape)
            if rect is None:
                continue
            if shape.shape_type == MSO_SHAPE_TYPE.PICTURE:
                out.append((rect, None))
                continue
            fill = own_fill(shape, theme, cmap)
            if fill:
                out.append((rect, fill))
    return out


def _lum(hex_colour: str) -> float:
    def chan(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * chan(r) + 0.7152 * chan(g) + 0.0722 * chan(b)


def contrast(a: str, b: str) -> float:
    la, lb = sorted((_lum(a), _lum(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def legible(colour: str, backgrounds: tuple[str, ...], need: float = 3.2) -> str:
    """The colour, darkened in steps (same hue) until it reads on every background: a light
    brand accent (gold, sky blue) still colours the text it heads, legibly."""
    out = colour
    for step in range(1, 12):
        if all(contrast(out, bg) >= need for bg in backgrounds):
            return out
        out = "".join(f"{int(int(colour[i:i + 2], 16) * (1 - 0.07 * step)):02X}" for i in (0, 2, 4))
    return out


# ---- charts --------------------------------------------------------------------------------

def crowded_labels(shape) -> str | None:
    """Why a chart's category labels will collide, or None. Labels get roughly the plot width
    (80 % of the frame) shared by the categories; a column chart's label needs its text width,
    a bar chart's its line height."""
    try:
        chart = shape.chart
        plot = chart.plots[0]
        cats = [str(c) for c in plot.categories]
    except Exception:  # noqa: BLE001
        return None
    if not cats or chart.chart_type is None:
        return None
    name = str(chart.chart_type).lower()
    if "pie" in name or "doughnut" in name:
        if len(cats) > 7:
            return f"{len(cats)} slices: the labels crowd; group the small ones into 'other'"
        return None
    size = 10.0
    rpr = chart._chartSpace.find(f".//{qn('c:txPr')}//{qn('a:defRPr')}")
    if rpr is not None and rpr.get("sz"):
        size = int(rpr.get("sz")) / 100
    w, h = int(shape.width) * 0.8, int(shape.height) * 0.7
    em = size * dm.EMU_PER_PT
    if "bar" in name and "column" not in name:
        per = h / len(cats)
        lines = max(c.count("\n") + 1 for c in cats)  # a label broken in two needs two lines
        if per < size * 1.25 * lines * dm.EMU_PER_PT:
            return f"{len(cats)} bars in {h / dm.EMU_PER_IN:.1f} in: the category labels overlap; fewer categories or a taller chart"
        share = max(dm.text_em(line) for c in cats for line in c.split("\n")) * em / int(shape.width)
        if share > 0.35:
            return (f"the category labels take {100 * share:.0f}% of the chart's width, leaving the bars little room: "
                    "shorter labels, or a table")
        return None
    per = w / len(cats)
    widest = max(dm.text_em(line) for c in cats for line in c.split("\n")) * em
    if widest > per * 1.9 or (widest > per and len(cats) > 6):
        return (f"{len(cats)} category labels up to {widest / dm.EMU_PER_IN:.1f} in wide share {per / dm.EMU_PER_IN:.1f} in each: "
                "they will be rotated or skipped; use a bar chart, shorter labels or fewer categories")
    return None
