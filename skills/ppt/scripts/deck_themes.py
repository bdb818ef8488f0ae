#!/usr/bin/env python3
"""Deck themes (python-pptx + stdlib): defined once here, applied to the slide master.

A theme is the deck's colour scheme (the palette native charts use too), its Latin and East
Asian fonts, the master's text styles (sizes, colours, `lang`) and the slide geometry every
layout shares. `apply_theme` writes it into the presentation's theme part and master, so a
slide added later in PowerPoint looks the same as the generated ones. With the user's own
template no theme is applied: `template_theme` reads the template's fonts and colours instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from lxml import etree
from pptx.opc.constants import RELATIONSHIP_TYPE as RT
from pptx.oxml.ns import qn

A = "http://schemas.openxmlformats.org/drawingml/2006/main"


@dataclass(frozen=True)
class Theme:
    name: str
    latin: str              # body and headings, Latin script
    ea: str                 # East Asian script
    head_latin: str
    head_ea: str
    text: str               # body text colour (hex)
    title: str              # title colour
    muted: str              # captions, numbers, secondary text
    background: str
    surface: str            # card / panel fill
    palette: tuple[str, ...]  # accent1..6: charts, KPI numbers, rules
    title_rule: str = "short"  # short | full | none: the line under slide titles
    title_size: float = 24.0  # an action title: a sentence, set like a consultant's headline
    body_size: float = 20.0
    from_template: bool = False
    heading_bold: bool = True
    extra: dict = field(default_factory=dict)

    @property
    def accent(self) -> str:
        return self.palette[0]


THEMES: dict[str, Theme] = {
    "corporate": Theme(
        "corporate", "Arial", "Microsoft YaHei", "Arial", "Microsoft YaHei",
        text="262626", title="1F3864", muted="6B7280", background="FFFFFF", surface="F2F5FA",
        palette=("2E75B6", "C55A11", "1F3864", "548235", "7F7F7F", "5B9BD5"), title_rule="short"),
    "academic": Theme(
        "academic", "Times New Roman", "Microsoft YaHei", "Times New Roman", "SimHei",
        text="1F2937", title="7A1F2B", muted="5F6B7A", background="FFFFFF", surface="F6F1EE",
        palette=("7A1F2B", "1B4F72", "B9770E", "117A65", "5D6D7E", "76448A"), title_rule="full"),
    "minimal": Theme(
        "minimal", "Arial", "Microsoft YaHei", "Arial", "Microsoft YaHei",
        text="334155", title="0F172A", muted="64748B", background="FFFFFF", surface="F1F5F9",
        palette=("0F766E", "B45309", "475569", "0369A1", "94A3B8", "334155"), title_rule="none",
        heading_bold=False, title_size=26.0),
}
DEFAULT_THEME = "corporate"


def resolve(name: str | None, font: str | None = None, ea_font: str | None = None) -> Theme:
    theme = THEMES.get((name or DEFAULT_THEME).lower())
    if theme is None:
        raise ValueError(f"unknown theme {name!r}; use one of {', '.join(THEMES)}")
    if font:
        theme = replace(theme, latin=font, head_latin=font)
    if ea_font:
        theme = replace(theme, ea=ea_font, head_ea=ea_font)
    return theme


def lang_of(texts: list[str]) -> str:
    """zh-CN when the deck's text is mostly Chinese, else en-US."""
    joined = "".join(texts)
    cjk = len(re.findall(r"[\u3400-\u9fff]", joined))
    latin = len(re.findall(r"[A-Za-z]", joined))
    return "zh-CN" if cjk * 2 >= latin and cjk else "en-US"


def _theme_part(prs):
    return prs.slide_master.part.part_related_by(RT.THEME)


def _set(el, tag: str, **attrs):
    child = el.find(qn(tag))
    if child is None:
        child = etree.SubElement(el, qn(tag))
    for k, v in attrs.items():
        child.set(k, v)
    return child


def _apply_theme_part(prs, theme: Theme) -> None:
    part = _theme_part(prs)
    root = etree.fromstring(part.blob)
    scheme = root.find(f".//{{{A}}}clrScheme")
    colours = {"dk1": theme.text, "lt1": "FFFFFF", "dk2": theme.title, "lt2": theme.surface,
               "hlink": theme.palette[0], "folHlink": theme.muted}
    colours.update({f"accent{i + 1}": c for i, c in enumerate(theme.palette[:6])})
    scheme.set("name", f"zcbot {theme.name}")
    for key, value in colours.items():
        slot = scheme.find(f"{{{A}}}{key}")
        for child in list(slot):
            slot.remove(child)
        etree.SubElement(slot, f"{{{A}}}srgbClr", val=value)
    fonts = root.find(f".//{{{A}}}fontScheme")
    fonts.set("name", f"zcbot {theme.name}")
    for tag, latin, ea in (("majorFont", theme.head_latin, theme.head_ea), ("minorFont", theme.latin, theme.ea)):
        el = fonts.find(f"{{{A}}}{tag}")
        el.find(f"{{{A}}}latin").set("typeface", latin)
        el.find(f"{{{A}}}ea").set("typeface", ea)
        for extra in el.findall(f"{{{A}}}font"):
            if extra.get("script") in ("Hans", "Hant"):
                extra.set("typeface", ea)
    part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)


def _style_levels(style, size: float, colour: str, lang: str, major: bool, bold: bool, step: float) -> None:
    for lvl in range(1, 10):
        ppr = style.find(qn(f"a:lvl{lvl}pPr"))
        if ppr is None:
            continue
        d = ppr.find(qn("a:defRPr"))
        if d is None:
            d = etree.SubElement(ppr, qn("a:defRPr"))
        d.set("sz", str(int(max(size - step * (lvl - 1), 12) * 100)))
        d.set("lang", lang)
        d.set("altLang", "en-US" if lang != "en-US" else "zh-CN")
        if bold:
            d.set("b", "1")
        for child in list(d):
            if child.tag in (qn("a:solidFill"), qn("a:latin"), qn("a:ea")):
                d.remove(child)
        fill = etree.SubElement(d, qn("a:solidFill"))
        etree.SubElement(fill, qn("a:srgbClr"), val=colour)
        etree.SubElement(d, qn("a:latin"), typeface="+mj-lt" if major else "+mn-lt")
        etree.SubElement(d, qn("a:ea"), typeface="+mj-ea" if major else "+mn-ea")
        # DrawingML order inside defRPr: fill before the fonts (already so), nothing after.


def _background(master, colour: str) -> None:
    csld = master._element.find(qn("p:cSld"))
    old = csld.find(qn("p:bg"))
    if old is not None:
        csld.remove(old)
    bg = etree.Element(qn("p:bg"))
    pr = etree.SubElement(bg, qn("p:bgPr"))
    fill = etree.SubElement(pr, qn("a:solidFill"))
    etree.SubElement(fill, qn("a:srgbClr"), val=colour)
    etree.SubElement(pr, qn("a:effectLst"))
    csld.insert(0, bg)


def apply_theme(prs, theme: Theme, lang: str) -> None:
    """Write the theme into the theme part and the master's text styles and background."""
    _apply_theme_part(prs, theme)
    master = prs.slide_master
    tx = master._element.find(qn("p:txStyles"))
    _style_levels(tx.find(qn("p:titleStyle")), theme.title_size, theme.title, lang, True, theme.heading_bold, 0)
    _style_levels(tx.find(qn("p:bodyStyle")), theme.body_size, theme.text, lang, False, False, 2)
    _style_levels(tx.find(qn("p:otherStyle")), 14, theme.text, lang, False, False, 0)
    _background(master, theme.background)


def template_theme(prs) -> Theme:
    """The fonts and colours of a user's template, as a Theme the builder can use for what it
    draws itself (chart palette, KPI numbers, card fills). Nothing is written into the template."""
    root = etree.fromstring(_theme_part(prs).blob)

    def colour(key: str, default: str) -> str:
        slot = root.find(f".//{{{A}}}clrScheme/{{{A}}}{key}")
        if slot is None or not len(slot):
            return default
        el = slot[0]
        return (el.get("val") if el.tag.endswith("srgbClr") else el.get("lastClr")) or default

    def font(tag: str, script: str, default: str) -> str:
        el = root.find(f".//{{{A}}}fontScheme/{{{A}}}{tag}/{{{A}}}{script}")
        face = el.get("typeface") if el is not None else ""
        return face or default

    palette = tuple(colour(f"accent{i}", "2E75B6") for i in range(1, 7))
    return Theme("template", font("minorFont", "latin", "Arial"), font("minorFont", "ea", "Microsoft YaHei"),
                 font("majorFont", "latin", "Arial"), font("majorFont", "ea", "Microsoft YaHei"),
                 text=colour("dk1", "262626"), title=colour("dk2", "1F3864"), muted="6B7280",
                 background=colour("lt1", "FFFFFF"), surface=colour("lt2", "F2F2F2"), palette=palette,
                 title_rule="none", from_template=True)
