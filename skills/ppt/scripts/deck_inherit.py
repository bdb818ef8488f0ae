#!/usr/bin/env python3
"""What a slide's text inherits, resolved the way PowerPoint and LibreOffice resolve it
(python-pptx + lxml): a run's colour and size come from the run, else from the list styles along
the chain shape -> layout placeholder -> master placeholder -> the master's text styles
(`titleStyle` for titles, `bodyStyle` for other placeholders, `otherStyle` for text boxes) ->
the presentation's default text style; scheme colours go through the colour map (the master's
`clrMap`, overridden by the layout's and the slide's `clrMapOvr`), so `tx1` on a dark cover
layout that maps it to `lt1` is white.

A template's dark cover with white titles set in the layout placeholder is therefore read as
white text, not as the theme's dark text colour.
"""

from __future__ import annotations

import colorsys

from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.oxml.ns import qn

TITLE_TYPES = (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE)
DEFAULT_MAP = {"bg1": "lt1", "tx1": "dk1", "bg2": "lt2", "tx2": "dk2"}


def colour_map(slide) -> dict[str, str]:
    """The scheme-colour aliases in force on a slide: master clrMap, then the layout's and the
    slide's overrides (an `overrideClrMapping` replaces the map, `masterClrMapping` keeps it)."""
    cmap = dict(DEFAULT_MAP)
    try:
        layout = slide.slide_layout
        holders = [layout.slide_master, layout, slide]
    except AttributeError:  # a layout or master itself
        holders = [slide]
    for holder in holders:
        el = holder._element
        node = el.find(qn("p:clrMap"))
        if node is None:
            ovr = el.find(qn("p:clrMapOvr"))
            node = ovr.find(qn("a:overrideClrMapping")) if ovr is not None else None
        if node is not None:
            cmap.update({k: v for k, v in node.attrib.items() if k in DEFAULT_MAP})
    return cmap


def _clamp(v: float) -> float:
    return max(0.0, min(1.0, v))


def modify(hex_colour: str, el) -> str:
    """Apply DrawingML colour modifiers (lumMod/lumOff, tint, shade) to a resolved colour."""
    r, g, b = (int(hex_colour[i:i + 2], 16) / 255 for i in (0, 2, 4))
    for mod in el:
        name = mod.tag.rsplit("}", 1)[-1]
        val = int(mod.get("val", "100000")) / 100000
        if name in ("lumMod", "lumOff"):
            h, lum, s = colorsys.rgb_to_hls(r, g, b)
            lum = _clamp(lum * val) if name == "lumMod" else _clamp(lum + val)
            r, g, b = colorsys.hls_to_rgb(h, lum, s)
        elif name == "tint":
            r, g, b = (c + (1 - c) * (1 - val) for c in (r, g, b))
        elif name == "shade":
            r, g, b = (c * val for c in (r, g, b))
    return "".join(f"{int(round(_clamp(c) * 255)):02X}" for c in (r, g, b))


def resolve_colour(el, scheme: dict[str, str], cmap: dict[str, str] | None = None) -> str | None:
    """The hex colour of a colour choice element or of its container (solidFill, bgRef,
    fontRef...): srgbClr, schemeClr through the colour map, sysClr, prstClr; None otherwise."""
    if el is None:
        return None
    for child in (el, *list(el)):
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "srgbClr":
            return modify(child.get("val", "000000"), child)
        if tag == "schemeClr":
            key = child.get("val")
            key = (cmap or DEFAULT_MAP).get(key, DEFAULT_MAP.get(key, key))
            base = scheme.get(key)
            return modify(base, child) if base else None
        if tag == "sysClr":
            return modify(child.get("lastClr") or ("FFFFFF" if child.get("val") == "window" else "000000"), child)
        if tag == "prstClr":
            return {"white": "FFFFFF", "black": "000000"}.get(child.get("val"))
    return None


def _ph_type(shape):
    try:
        return shape.placeholder_format.type if shape.is_placeholder else None
    except Exception:  # noqa: BLE001 - a placeholder without a readable type
        return None


def _lvl(lst, level: int):
    if lst is None:
        return None
    return lst.find(qn(f"a:lvl{level + 1}pPr"))


def level_styles(shape, level: int) -> list:
    """The `a:lvlNpPr` elements that apply to a paragraph of `shape` at `level`, nearest first."""
    out = []
    body = shape._element.find(qn("p:txBody"))
    if body is not None:
        out.append(_lvl(body.find(qn("a:lstStyle")), level))
    kind = _ph_type(shape)
    holder = shape
    for _ in range(2):  # slide placeholder -> layout placeholder -> master placeholder
        try:
            holder = holder._base_placeholder if holder is not None and holder.is_placeholder else None
        except Exception:  # noqa: BLE001 - no inheritance chain (python-pptx raises on masters)
            holder = None
        if holder is None:
            break
        tb = holder._element.find(qn("p:txBody"))
        if tb is not None:
            out.append(_lvl(tb.find(qn("a:lstStyle")), level))
    master = _master_of(shape)
    if master is not None:
        tx = master._element.find(qn("p:txStyles"))
        if tx is not None:
            style = "p:titleStyle" if kind in TITLE_TYPES else "p:bodyStyle" if kind is not None else "p:otherStyle"
            out.append(_lvl(tx.find(qn(style)), level))
    try:
        pres = shape.part.package.presentation_part.presentation._element
        out.append(_lvl(pres.find(qn("p:defaultTextStyle")), level))
    except Exception:  # noqa: BLE001
        pass
    return [el for el in out if el is not None]


def _master_of(shape):
    part = shape.part
    try:
        return part.slide_layout.slide_master  # a slide
    except AttributeError:
        pass
    try:
        return part.slide_master  # a layout, or the master itself
    except AttributeError:
        return None


def inherited(shape, level: int, what: str, styles: list | None = None):
    """The nearest inherited `defRPr` property: "sz" (points, float), "b" (bool) or "fill" (the
    solidFill element); None when nothing in the chain sets it."""
    for ppr in level_styles(shape, level) if styles is None else styles:
        d = ppr.find(qn("a:defRPr"))
        if d is None:
            continue
        if what == "fill":
            fill = d.find(qn("a:solidFill"))
            if fill is not None:
                return fill
        elif d.get(what) is not None:
            return int(d.get("sz")) / 100.0 if what == "sz" else d.get("b") in ("1", "true")
    return None


def _inherited_fill(shape, level: int):
    """A placeholder's fill from its chain; a text box's or autoshape's from its own list style,
    then its theme style (`fontRef`: white text on a filled autoshape), then the defaults."""
    styles = level_styles(shape, level)
    if shape.is_placeholder:
        return inherited(shape, level, "fill", styles)
    body = shape._element.find(qn("p:txBody"))
    own = _lvl(body.find(qn("a:lstStyle")), level) if body is not None else None
    fill = inherited(shape, level, "fill", [own] if own is not None else [])
    if fill is None:
        fill = style_font_colour(shape)
    return fill if fill is not None else inherited(shape, level, "fill", styles)


def style_font_colour(shape):
    """An autoshape's theme style text colour (`p:style/a:fontRef`), e.g. lt1 on a filled shape."""
    style = shape._element.find(qn("p:style"))
    return style.find(qn("a:fontRef")) if style is not None else None


def run_colours(shape, scheme: dict[str, str], cmap: dict[str, str]) -> list[tuple[str, int]]:
    """(colour, characters) for every run of text in the shape, inheritance resolved."""
    out = []
    by_level: dict[int, str | None] = {}
    default = scheme.get(cmap.get("tx1", "dk1"), "000000")
    for p in shape.text_frame.paragraphs:
        level = p.level or 0
        ppr = p._p.find(qn("a:pPr"))
        d = ppr.find(qn("a:defRPr")) if ppr is not None else None
        para_fill = d.find(qn("a:solidFill")) if d is not None else None
        for el in p._p:
            if el.tag not in (qn("a:r"), qn("a:fld")):
                continue
            t = el.find(qn("a:t"))
            text = ((t.text or "") if t is not None else "").strip()
            if not text:
                continue
            rpr = el.find(qn("a:rPr"))
            fill = rpr.find(qn("a:solidFill")) if rpr is not None else None
            colour = resolve_colour(fill, scheme, cmap) or resolve_colour(para_fill, scheme, cmap)
            if colour is None:
                if level not in by_level:
                    by_level[level] = resolve_colour(_inherited_fill(shape, level), scheme, cmap)
                colour = by_level[level]
            out.append((colour or default, len(text)))
    return out
