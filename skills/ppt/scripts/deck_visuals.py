#!/usr/bin/env python3
"""Visual slide kinds: native chart (+ takeaway), big numbers (KPIs), 2-4 cards, timeline /
process. Every element stays editable: numbers are text in shapes, charts keep their data.

Charts use the deck's palette (theme accents, or the template's), the deck's fonts, light
gridlines and horizontal axis titles (a rotated Chinese title reads sideways).
"""

from __future__ import annotations

from lxml import etree
from pptx.chart.data import CategoryChartData
from pptx.enum.chart import XL_CHART_TYPE, XL_LABEL_POSITION, XL_LEGEND_POSITION
from pptx.enum.shapes import MSO_SHAPE
from pptx.enum.text import MSO_ANCHOR, PP_ALIGN
from pptx.oxml.ns import qn
from pptx.util import Inches, Pt

import deck_build
import deck_cards as cards
import deck_measure as dm
from deck_build import Deck, rgb
from deck_outline import norm_bullets
from deck_slides import caption, fill_list

CHART_TYPES = {
    "bar": XL_CHART_TYPE.BAR_CLUSTERED, "column": XL_CHART_TYPE.COLUMN_CLUSTERED,
    "stacked_bar": XL_CHART_TYPE.BAR_STACKED, "stacked_column": XL_CHART_TYPE.COLUMN_STACKED,
    "line": XL_CHART_TYPE.LINE_MARKERS, "pie": XL_CHART_TYPE.PIE, "doughnut": XL_CHART_TYPE.DOUGHNUT,
    "area": XL_CHART_TYPE.AREA,
}


def _label(text) -> str:
    f = deck_build.FORMULAS
    return f.to_unicode(str(text)) if f is not None else str(text)


def _chart_fonts(deck: Deck, chart) -> None:
    chart.font.size = Pt(14)
    chart.font.color.rgb = rgb(deck.theme.text)
    if deck.templated:
        return
    chart.font.name = deck.theme.latin
    rpr = chart._chartSpace.find(f".//{qn('c:txPr')}//{qn('a:defRPr')}")
    if rpr is not None:
        etree.SubElement(rpr, qn("a:ea"), typeface=deck.theme.ea)


def _horizontal(title_tf) -> None:
    body = title_tf._txBody.find(qn("a:bodyPr"))
    body.set("rot", "0")
    body.set("vert", "horz")


def _colour_series(deck: Deck, chart, ctype: str) -> None:
    palette = deck.theme.palette
    plot = chart.plots[0]
    if ctype in ("pie", "doughnut"):
        for i, point in enumerate(plot.series[0].points):
            point.format.fill.solid()
            point.format.fill.fore_color.rgb = rgb(palette[i % len(palette)])
        return
    for i, series in enumerate(plot.series):
        colour = rgb(palette[i % len(palette)])
        if ctype == "line":
            series.format.line.color.rgb = colour
            series.format.line.width = Pt(2.5)
            series.smooth = False
            series.marker.format.fill.solid()
            series.marker.format.fill.fore_color.rgb = colour
            series.marker.format.line.color.rgb = colour
        else:
            series.format.fill.solid()
            series.format.fill.fore_color.rgb = colour
    if ctype in ("column", "bar", "stacked_column", "stacked_bar"):
        plot.gap_width = 60
        if ctype.startswith("stacked"):
            plot.overlap = 100


def two_lines(text: str) -> str:
    """A category label broken into two balanced lines (at a space near the middle for Latin
    text, in the middle for Chinese); LibreOffice and PowerPoint both honour the line break."""
    if "\n" in text or len(text) < 6:
        return text
    mid = len(text) // 2
    spaces = [i for i, ch in enumerate(text) if ch == " "]
    if spaces and not dm.has_cjk(text):
        cut = min(spaces, key=lambda i: abs(i - mid))
        return text[:cut] + "\n" + text[cut + 1:]
    while 0 < mid < len(text) - 1 and (text[mid] in dm.NO_START or not dm.is_wide(text[mid - 1])):
        mid += 1  # never a closing mark first, never inside a Latin word or number
    return text[:mid] + "\n" + text[mid:]


def pie_that_reads(c: dict) -> dict:
    """A pie reads with a few large shares; more than 6 slices or a slice under 3 % becomes a
    bar chart sorted by value (the order a reader compares shares in)."""
    ctype = c.get("type", c.get("kind", "column"))
    if ctype not in ("pie", "doughnut"):
        return c
    values = [v or 0 for v in c["series"][0]["values"]]
    total = sum(values) or 1
    if len(values) <= 6 and min(values) / total >= 0.03:
        return c
    order = sorted(range(len(values)), key=lambda i: values[i])  # a bar chart draws the first category at the bottom
    ser = {**c["series"][0], "values": [c["series"][0]["values"][i] for i in order]}
    return {**c, "type": "bar", "categories": [c["categories"][i] for i in order], "series": [ser], "legend": False,
            "data_labels": True}


def key_point(c: dict, takeaway: str | None) -> tuple[int, int, str] | None:
    """(series, category, label) of the datum the slide is about: the outline's `highlight`
    ({"category", "series", "label"}), else with a takeaway the category it names (else the
    last) in the last series. None for pies and charts without a takeaway or highlight."""
    ctype = c.get("type", c.get("kind", "column"))
    if ctype not in ("column", "bar", "line", "area") or not (c.get("highlight") or takeaway):
        return None
    cats = [str(v) for v in c["categories"]]
    names = [str(ser.get("name", "")) for ser in c["series"]]
    want = c.get("highlight") or {}
    ci = cats.index(str(want["category"])) if str(want.get("category")) in cats else None
    if ci is None and takeaway:
        named = [i for i, cat in enumerate(cats) if cat and cat in str(takeaway)]
        ci = named[-1] if named else None
    ci = len(cats) - 1 if ci is None else ci
    si = names.index(str(want["series"])) if str(want.get("series")) in names else len(names) - 1
    value = c["series"][si]["values"][ci]
    if value is None:
        return None
    label = str(want.get("label") or _formatted(value, str(c.get("number_format") or "")))
    return si, ci, label


def _formatted(value, fmt: str) -> str:
    """A value as the chart's Excel number format shows it (the common formats)."""
    decimals = len(fmt.split(".")[1].split("%")[0].split('"')[0]) if "." in fmt else 0
    if fmt.endswith("%") and '"' not in fmt:
        return f"{value * 100:,.{decimals}f}%"
    text = f"{value:,.{decimals}f}" if fmt else (f"{value:,.1f}" if isinstance(value, float) and value % 1 else f"{value:,}")
    return text + ("%" if fmt.endswith('"%"') else "")


def highlight(deck: Deck, chart, c: dict, ctype: str, takeaway: str | None) -> None:
    """The key datum labelled on its bar or point, bold in the accent colour: the reader sees
    where the takeaway's number is."""
    key = key_point(c, takeaway)
    if key is None:
        return
    si, ci, label = key
    series = chart.plots[0].series[si]
    if chart.plots[0].has_data_labels:  # the point's own label must not switch off its neighbours'
        series.data_labels.show_value = True
        series.data_labels.font.size = Pt(12)
        if c.get("number_format"):
            series.data_labels.number_format = c["number_format"]
            series.data_labels.number_format_is_linked = False
    point = series.points[ci]
    dl = point.data_label
    dl.has_text_frame = True
    dl.text_frame.text = label
    dl.position = XL_LABEL_POSITION.ABOVE if ctype == "line" else XL_LABEL_POSITION.OUTSIDE_END
    for p in dl.text_frame.paragraphs:
        for r in p.runs:
            r.font.bold = True
            r.font.size = Pt(16)
            r.font.color.rgb = rgb(deck.ink(deck.theme.palette[si % len(deck.theme.palette)]))


def add_chart(deck: Deck, slide, c: dict, x: int, y: int, w: int, h: int, takeaway: str | None = None):
    ctype = c.get("type", c.get("kind", "column"))
    c = pie_that_reads(c)
    ctype = c.get("type", ctype)
    data = CategoryChartData()
    labels = [_label(v) for v in c["categories"]]
    if ctype in ("bar", "stacked_bar"):  # long labels on two lines: the bars keep their width
        limit = 0.28 * w / (14 * dm.EMU_PER_PT)
        labels = [two_lines(t) if dm.text_em(t) > limit else t for t in labels]
    data.categories = labels
    for ser in c["series"]:
        data.add_series(_label(ser.get("name", "")), ser["values"], number_format=c.get("number_format"))
    frame = slide.shapes.add_chart(CHART_TYPES[ctype], x, y, w, h, data)
    frame.name = "Chart"
    chart = frame.chart
    _chart_fonts(deck, chart)
    _colour_series(deck, chart, ctype)
    multi = len(c["series"]) > 1 or ctype in ("pie", "doughnut")
    chart.has_legend = bool(c.get("legend", multi))
    if chart.has_legend:
        chart.legend.position = XL_LEGEND_POSITION.BOTTOM
        chart.legend.include_in_layout = False
    if c.get("data_labels", ctype in ("pie", "doughnut")):
        plot = chart.plots[0]
        plot.has_data_labels = True
        labels = plot.data_labels
        labels.font.size = Pt(12)
        if ctype in ("pie", "doughnut"):
            labels.font.color.rgb = rgb("FFFFFF")  # on the coloured slices
            labels.font.bold = True
            labels.show_percentage = not c.get("number_format")
            labels.show_value = bool(c.get("number_format"))
        if c.get("number_format"):
            labels.number_format = c["number_format"]
            labels.number_format_is_linked = False
    highlight(deck, chart, c, ctype, takeaway)
    chart.has_title = bool(c.get("title"))
    if c.get("title"):
        chart.chart_title.text_frame.text = _label(c["title"])
    if ctype not in ("pie", "doughnut"):
        value_axis = chart.value_axis
        value_axis.has_major_gridlines = True
        value_axis.major_gridlines.format.line.color.rgb = rgb("D9D9D9")
        value_axis.format.line.fill.background()
        chart.category_axis.format.line.color.rgb = rgb("A6A6A6")
        if c.get("number_format"):
            value_axis.tick_labels.number_format = c["number_format"]
            value_axis.tick_labels.number_format_is_linked = False
        for axis_key, axis in (("x_title", chart.category_axis), ("y_title", value_axis)):
            if c.get(axis_key):
                axis.has_title = True
                axis.axis_title.text_frame.text = _label(c[axis_key])
                _horizontal(axis.axis_title.text_frame)
                for p in axis.axis_title.text_frame.paragraphs:
                    for r in p.runs:
                        r.font.size = Pt(13)
                        r.font.bold = False
                        r.font.color.rgb = rgb(deck.theme.muted)
    return frame


def chart_slide(deck: Deck, s: dict):
    slide = deck.titled(s)
    side = norm_bullets(s.get("bullets"), "")
    takeaway = s.get("takeaway")
    x, w = deck.M, deck.body_w
    cap_h = int(deck.H * 0.07) if s.get("caption") else 0
    if side or takeaway:
        panel_w = int(deck.body_w * 0.32)
        gap = int(deck.W * 0.025)
        px = deck.M + deck.body_w - panel_w
        panel = deck.rect(slide, px, deck.body_top, panel_w, deck.body_h, deck.theme.surface, "Takeaway")
        tf = panel.text_frame
        tf.vertical_anchor = MSO_ANCHOR.MIDDLE
        tf.margin_left = tf.margin_right = Inches(0.25)
        paras = ([(str(takeaway), 0)] if takeaway else []) + side
        inner_w = panel_w - Inches(0.5) + 2 * deck_build.INSET_LR
        size = fill_list(deck, panel, paras, (px, deck.body_top, inner_w, deck.body_h), sizes=cards.card_sizes(deck),
                         placeholder=False, bullets="manual" if side else False)
        if len(paras) == 1:  # one takeaway: a callout as tall as its text, level with the chart's middle
            panel.height = cards.card_height(deck.need(paras, inner_w, size, False, bold=True), deck.body_h)
            panel.top = cards.centred_top(deck, panel.height)
        for p in tf.paragraphs:
            p.alignment = PP_ALIGN.LEFT
        if takeaway:  # the takeaway leads, in the accent colour, without a bullet
            first = tf.paragraphs[0]
            ppr = first._p.get_or_add_pPr()
            ppr.set("marL", "0")
            ppr.set("indent", "0")
            deck_build.set_bullet(ppr, "a:buNone")
            for r in first.runs:
                r.font.bold = True
                r.font.color.rgb = rgb(deck.ink(deck.theme.accent))
            deck.no_orphans(panel)  # measured again: bold and without the bullet indent
        w = deck.body_w - panel_w - gap
    add_chart(deck, slide, s["chart"], x, deck.body_top, w, deck.body_h - cap_h, takeaway)
    if cap_h:
        caption(deck, slide, s["caption"], deck.body_bottom - cap_h + int(deck.H * 0.01))
    return slide


def _card(deck: Deck, slide, x, y, w, h, name: str, colour: str):
    deck.rect(slide, x, y, w, h, deck.theme.surface, name)
    deck.rect(slide, x, y, w, Inches(0.08), colour, f"{name} Rule")


def kpis_slide(deck: Deck, s: dict):
    """Big numbers on cards: each value on one line as large as the card's width allows, the
    label and note under it; the cards as tall as their text needs (deck_cards), the cards and
    the takeaway centred in the body."""
    slide = deck.titled(s)
    items = s["kpis"]
    n = len(items)
    w, gap = deck.columns(n, 0.025)
    note = s.get("takeaway")
    top_value = 72 if n <= 2 else 66 if n == 3 else 54
    inner = w - 2 * deck_build.INSET_LR
    label_size = min(22, deck.last_title_size - 2)
    sizes = [next((z for z in range(top_value, 27, -2)
                   if dm.wrapped_lines(str(item.get("value", "")), inner, z, deck.fam(bold=True)) == 1), 28)
             for item in items]  # a number on one line
    size = min(sizes)  # one size for the row: the numbers compare at a glance

    def text_need(item) -> int:
        bold, plain = deck.fam(bold=True), deck.fam()
        paras = [(str(item.get("value", "")), size, 0, 0.0, bold)]
        paras += [(str(text), sz, 0, 6.0, bold if sz == label_size else plain)
                  for text, sz in ((item.get("label"), label_size), (item.get("note"), 16)) if text]
        return dm.text_height(paras, inner) + 2 * deck_build.INSET_TB

    pad = Inches(0.25)
    limit = int(deck.body_h * (0.68 if note else 0.82))
    need = max(text_need(item) for item in items)
    h = max(cards.card_height(need, limit, 0.7), min(limit, need + 2 * pad))
    note_h = deck.need([(str(note), 0)], deck.body_w, 20, False) if note else 0
    y = cards.centred_top(deck, h + (Inches(0.25) + note_h if note else 0))
    for i, item in enumerate(items):
        x = deck.M + i * (w + gap)
        colour = deck.theme.palette[i % 3] if not deck.templated else deck.theme.accent
        _card(deck, slide, x, y, w, h, f"KPI {i + 1}", colour)
        box = deck.textbox(slide, x, y + pad, w, h - 2 * pad, [], None, f"KPI Text {i + 1}")
        tf = box.text_frame
        tf.vertical_anchor = MSO_ANCHOR.MIDDLE
        value = str(item.get("value", ""))
        deck.set_text(box, [(value, 0)], size, bold=True, colour=deck.ink(colour), align=PP_ALIGN.CENTER, bullets=False)
        for text, sz, col in ((item.get("label"), label_size, deck.theme.text), (item.get("note"), 16, deck.theme.muted)):
            if text:
                p = tf.add_paragraph()
                p.alignment = PP_ALIGN.CENTER
                p.space_before = Pt(6)
                deck.add_runs(p, str(text), sz, colour=col, bold=(sz == label_size))
    if note:
        deck.textbox(slide, deck.M, y + h + Inches(0.25), deck.body_w, note_h, [(str(note), 0)], 20, "Takeaway",
                     colour=deck.theme.text, align=PP_ALIGN.CENTER)
    return slide


def cards_slide(deck: Deck, s: dict):
    """2-4 cards side by side: a numbered, coloured head and a few lines each; the text as large as
    the cards allow, the cards as tall as the fullest one needs (deck_cards), centred in the body."""
    slide = deck.titled(s)
    items = s["cards"]
    n = len(items)
    w, gap = deck.columns(n, 0.022)
    pad, head_h = Inches(0.18), Inches(1.35)
    inner_w = w - 2 * pad
    bodies = [([(str(it["text"]), 0)] if it.get("text") else []) + norm_bullets(it.get("bullets"), "") for it in items]
    avail = deck.body_h - head_h - 2 * pad
    sizes = cards.card_sizes(deck)
    size = sizes[-1]
    for size in sizes:  # as large as the card allows (deck_cards)
        if all(deck.need(b, inner_w, size, False, space=size * 0.5) <= avail for b in bodies if b):
            break
    need = max([deck.need(b, inner_w, size, False, space=size * 0.5) for b in bodies if b] or [0])
    card_h = cards.card_height(head_h + need + 2 * pad, deck.body_h)
    top = cards.centred_top(deck, card_h)
    for i, (item, paras) in enumerate(zip(items, bodies)):
        x = deck.M + i * (w + gap)
        colour = deck.theme.palette[i % len(deck.theme.palette)] if not deck.templated else deck.theme.accent
        _card(deck, slide, x, top, w, card_h, f"Card {i + 1}", colour)
        head = deck.textbox(slide, x + pad - deck_build.INSET_LR, top + pad, inner_w + 2 * deck_build.INSET_LR,
                            head_h - pad, [(f"{i + 1:02d}", 0)], 28, f"Card Head {i + 1}", bold=True, colour=deck.ink(colour),
                            heading=True)
        p = head.text_frame.add_paragraph()
        deck.add_runs(p, str(item.get("title", "")), 22 if n <= 3 else 20, bold=True, colour=deck.theme.title, heading=True)
        if paras:
            rect = (x + pad - deck_build.INSET_LR, top + head_h + pad, inner_w + 2 * deck_build.INSET_LR,
                    card_h - head_h - 2 * pad)
            box = deck.textbox(slide, *rect, [], None, f"Card Text {i + 1}")
            deck.set_text(box, paras, size, colour=deck.theme.text, bullets="manual" if item.get("bullets") else False,
                          space=size * 0.5)
    return slide


def timeline_slide(deck: Deck, s: dict, numbered: bool):
    """Steps along a line: dates above (timeline) or step numbers in the markers (process)."""
    slide = deck.titled(s)
    steps = s["steps"]
    n = len(steps)
    col = deck.body_w // n
    dot, label_h, under = Inches(0.5), Inches(0.7), Inches(0.25)
    texts = [[(str(st.get("title", "")), 0)] + ([(str(st["text"]), 0)] if st.get("text") else []) for st in steps]
    need = max(deck.need(p, col, 20, False, space=6) for p in texts)
    # the composition (labels, line, texts) sits in the middle of the body, not pinned to its top
    block = label_h + dot + under + need
    line_y = deck.body_top + max(0, (deck.body_h - block) // 2) + label_h + dot // 2
    deck.rect(slide, deck.M + col // 2, line_y - Inches(0.02), col * (n - 1), Inches(0.04), deck.theme.muted, "Timeline")
    for i, step in enumerate(steps):
        cx = deck.M + col * i + col // 2
        colour = deck.theme.palette[0] if not deck.templated else deck.theme.accent
        marker = deck.rect(slide, cx - dot // 2, line_y - dot // 2, dot, dot, colour, f"Step Marker {i + 1}", MSO_SHAPE.OVAL)
        if numbered:
            deck.set_text(marker, [(str(i + 1), 0)], 16, bold=True, colour=deck.on(colour), align=PP_ALIGN.CENTER, bullets=False)
            marker.text_frame.margin_left = marker.text_frame.margin_right = 0
        if step.get("label"):
            deck.textbox(slide, cx - col // 2 + Inches(0.05), line_y - dot // 2 - label_h, col - Inches(0.1), label_h,
                         [(str(step["label"]), 0)], 18, f"Step Label {i + 1}", bold=True, colour=deck.ink(colour),
                         align=PP_ALIGN.CENTER).text_frame.vertical_anchor = MSO_ANCHOR.BOTTOM
        ty = line_y + dot // 2 + under
        paras = texts[i]
        rect = (deck.M + col * i, ty, col, deck.body_bottom - ty)
        box = deck.textbox(slide, *rect, [], None, f"Step Text {i + 1}")
        size = deck.fit(paras, rect[2], rect[3], (20, 18, 16), False) or 16
        deck.set_text(box, paras, size, colour=deck.theme.text, align=PP_ALIGN.CENTER, bullets=False, space=6)
        for r in box.text_frame.paragraphs[0].runs:
            r.font.bold = True
            r.font.color.rgb = rgb(deck.theme.title)
    return slide
