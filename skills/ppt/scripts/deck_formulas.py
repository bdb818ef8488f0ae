#!/usr/bin/env python3
"""Numbers on a slide that contradict each other, for check_deck.py (stdlib + python-pptx).

A reader checks the arithmetic a slide shows; a slide whose numbers do not add up loses the
room. Claims read from the slide's text, tables and charts:

- an equation written out: "12 + 30 = 40", "3 × 4 = 12", "100 − 30 = 70"            -> error
- a change between two values shown with its rate: "从 10.2 亿增长到 14.1 亿（+38%）",
  "from 120 to 150 (+25%)", "由 4.0 提升至 15.2，达到原来的 3.8 倍"                  -> warning
- a part and its whole with the share: "企业客户 8.9 亿，占 15.4 亿的 58%", "42 of 120 (35%)"
                                                                                         -> warning
- a table's total row (合计 / 总计 / Total) against the sum of the rows above it      -> warning
- a growth label on a chart point ("+55 %" on the 2025 bar) against that point and the one
  before it                                                                              -> warning
Each comparison allows for the rounding of the numbers as written (their decimals), so "1/3 =
33%" passes and "12 + 30 = 40" does not. Findings are (kind, severity, shape, message) tuples.
"""

from __future__ import annotations

import re

from pptx.oxml.ns import qn

NUM = r"[-+−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+−]?\d+(?:\.\d+)?"
UNIT = r"\s?(?:%|亿元|亿|万元|万|千|元|倍|[kKmMbB](?:n)?|个百分点|pp)?"
_OP = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "−": lambda a, b: a - b, "×": lambda a, b: a * b,
       "x": lambda a, b: a * b, "*": lambda a, b: a * b, "/": lambda a, b: a / b if b else None,
       "÷": lambda a, b: a / b if b else None}
EQUATION = re.compile(rf"(?P<lhs>(?:(?:{NUM}){UNIT}\s*[-+−×x*/÷]\s*)+(?:{NUM}){UNIT})\s*[=＝]\s*(?P<rhs>{NUM}){UNIT}")
_TERM = re.compile(rf"({NUM}){UNIT}\s*([-+−×x*/÷]?)")
_WORD_UNIT = r"(?:%|[A-Za-z]{1,3}|[\u4e00-\u9fff]{1,2}?)"  # 亿元, 天, 家, ms, k ...
CHANGE = re.compile(rf"(?:从|由|from\s)\s*(?P<a>{NUM})\s?(?P<ua>{_WORD_UNIT})?\s*"
                    rf"(?:增长|增加|提升|提高|上升|攀升|跃升|下降|减少|降低|缩短|延长|扩大|缩小|精简|压缩|削减|回落|增|降|减|跌|升|涨|rose|grew|fell|"
                    rf"increased|decreased|dropped)?\s*(?:到|至|为|to)\s*(?P<b>{NUM})\s?(?P<ub>{_WORD_UNIT})?", re.I)
RATE = re.compile(r"(?P<sign>[-+−])\s?(?P<p>\d+(?:\.\d+)?)\s?%|(?P<word>增长|增加|提升|提高|上升|下降|减少|降低|up|down|"
                  r"growth of|increase of|decrease of)\s*(?:了)?\s*(?P<q>\d+(?:\.\d+)?)\s?%", re.I)
TIMES = re.compile(r"(?P<t>\d+(?:\.\d+)?)\s?倍")
SHARE = re.compile(rf"(?P<a>{NUM})\s?(?P<ua>亿元|亿|万元|万|元|[kKmM])?[^0-9%]{{0,12}}?(?:占|of|out of|/)\s*"
                   rf"(?:总(?:收入|额|量|数)?\s*)?(?P<b>{NUM})\s?(?P<ub>亿元|亿|万元|万|元|[kKmM])?"
                   rf"[^0-9%]{{0,10}}?(?P<p>\d+(?:\.\d+)?)\s?%", re.I)
TOTAL_ROW = re.compile(r"^\s*(合计|总计|总和|小计|总数|total|sum|subtotal)\b", re.I)
_PLAIN = re.compile(rf"^\s*(?P<n>{NUM})\s*$")


def number(text: str, exact: bool = False) -> tuple[float, float]:
    """(value, half a unit of its last written digit): '15.4' -> (15.4, 0.05). `exact`: the
    operands of a written equation are what is computed ('3 × 4 = 13' is wrong, not rounding)."""
    t = text.replace(",", "").replace("−", "-").replace("+", "")
    if exact:
        return float(t), 0.0
    return float(t), 0.5 * 10 ** -(len(t.split(".")[1]) if "." in t else 0)


def _close(computed: float, written: float, tol: float) -> bool:
    return abs(computed - written) <= tol + 1e-9


def equation(text: str) -> str | None:
    """'12 + 30 = 40' and its kin: a message when the left side does not give the right side."""
    for m in EQUATION.finditer(text):
        terms = _TERM.findall(m.group("lhs"))
        value, tol = number(terms[0][0], exact=True)
        op = terms[0][1]
        ok = True
        for raw, nxt in terms[1:]:
            b, tb = number(raw, exact=True)
            fn = _OP.get(op)
            if fn is None:
                ok = False
                break
            result = fn(value, b)
            if result is None:
                ok = False
                break
            tol = tol + tb if op in "+-−" else abs(result) * (tol / abs(value or 1) + tb / abs(b or 1))
            value, op = result, nxt
        if not ok:
            continue
        rhs, trhs = number(m.group("rhs"))
        if not _close(value, rhs, tol + trhs):
            return f"'{m.group(0).strip()}' does not add up: the left side gives {value:g}"
    return None


def _rate(text: str) -> tuple[float, float] | None:
    m = RATE.search(text)
    if not m:
        return None
    if m.group("p") is not None:
        raw, negative = m.group("p"), m.group("sign") in "-−"
    else:
        raw, negative = m.group("q"), m.group("word").lower() in ("下降", "减少", "降低", "down", "decrease of")
    value, tol = number(raw)
    return (-value if negative else value), tol


def _two_values(pattern: re.Pattern, text: str) -> tuple[re.Match | None, tuple]:
    """The first match of `pattern` with its values a and b (value, tolerance), when their units agree."""
    m = pattern.search(text)
    if not m or (m.group("ua") and m.group("ub") and m.group("ua") != m.group("ub")):
        return None, ()
    return m, (number(m.group("a")), number(m.group("b")))


def change(text: str) -> str | None:
    """A change from A to B shown with its rate (+38%) or multiple (3.8 倍) that A and B do not give."""
    m, pair = _two_values(CHANGE, text)
    if m is None:
        return None
    (a, ta), (b, tb) = pair
    if a <= 0 or "%" in (m.group("ua") or "", m.group("ub") or ""):
        return None  # a change between two rates is in points, not per cent
    if all(1900 <= v <= 2100 and v == int(v) for v in (a, b)):
        return None  # "from 2022 to 2025": years, not values
    rest = text[m.end():] + " " + text[:m.start()]
    spread = 100 * (b / a) * (ta / a + tb / max(abs(b), 1e-9))
    rate = _rate(rest)
    if rate is not None:
        computed = 100 * (b - a) / a
        if not _close(computed, rate[0], rate[1] + spread + 0.05):
            return (f"from {m.group('a')} to {m.group('b')} is {computed:+.1f}%, but the slide says {rate[0]:+g}%")
        return None
    times = TIMES.search(rest)
    if times:
        t, tt = number(times.group("t"))
        if not _close(b / a, t, tt + spread / 100 + 0.005):
            return f"{m.group('b')} is {b / a:.2f} times {m.group('a')}, but the slide says {times.group(0)}"
    return None


def share(text: str) -> str | None:
    """'8.9 亿，占 15.4 亿的 58%': a part, its whole and the share they do not give."""
    m, pair = _two_values(SHARE, text)
    if m is None:
        return None
    (a, ta), (b, tb) = pair
    p, tp = number(m.group("p"))
    if b <= 0 or a > b:
        return None
    computed = 100 * a / b
    if _close(computed, p, tp + 100 * (ta / b + a * tb / b ** 2) + 0.05):
        return None
    return f"{m.group('a')} of {m.group('b')} is {computed:.1f}%, but the slide says {m.group('p')}%"


def text_findings(text: str) -> list[tuple[str, str]]:
    """(severity, message) for one paragraph or one text box."""
    found = []
    msg = equation(text)
    if msg:
        found.append(("error", msg))
    for rule in (change, share):
        msg = rule(text)
        if msg:
            found.append(("warning", msg))
    return found


def table_total(rows: list[list[str]]) -> str | None:
    """A total row (合计 / Total) whose numbers are not the sum of the rows above it."""
    for ti, row in enumerate(rows):
        if ti < 2 or not row or not TOTAL_ROW.match(row[0]):
            continue
        body = rows[1:ti] if not any(_PLAIN.match(c) for c in rows[0][1:]) else rows[:ti]
        for ci in range(1, len(row)):
            m = _PLAIN.match(row[ci])
            cells = [r[ci] if ci < len(r) else "" for r in body]
            parts = [_PLAIN.match(c) for c in cells]
            if not m or not cells or not all(parts):
                continue  # a rate, a note or an empty cell: not a column that adds up
            values = [number(p.group("n")) for p in parts]
            total, tt = number(m.group("n"))
            computed = sum(v for v, _ in values)
            if not _close(computed, total, tt + sum(t for _, t in values)):
                head = rows[0][ci] if ci < len(rows[0]) else f"column {ci + 1}"
                return f"the {row[0].strip()} row gives {row[ci].strip()} for '{head}', but the rows above add up to {computed:g}"
    return None


def chart_labels(chart) -> list[str]:
    """Growth labels on chart points ('+55 %') that the point and the one before it do not give."""
    found = []
    for plot in chart.plots:
        for series in plot.series:
            values = list(series.values)
            for dlbl in series._element.iter(qn("c:dLbl")):
                idx = dlbl.find(qn("c:idx"))
                text = "".join(t.text or "" for t in dlbl.iter(qn("a:t")))
                rate = RATE.search(text)
                if idx is None or rate is None or rate.group("p") is None:
                    continue
                i = int(idx.get("val"))
                if i < 1 or i >= len(values) or not values[i - 1] or values[i] is None:
                    continue
                written, tol = _rate(text) or (0.0, 0.0)
                before, now = float(values[i - 1]), float(values[i])
                computed = 100 * (now - before) / before
                if not _close(computed, written, tol + 0.6):  # plotted values are rounded when typed in
                    found.append(f"the label '{text.strip()}' on point {i + 1} of '{series.name}' says {written:+g}%, "
                                 f"but {before:g} → {now:g} is {computed:+.1f}%")
    return found


def slide_findings(shapes) -> list[tuple]:
    """Every inconsistency on a slide as (kind, severity, shape name, message)."""
    found = []
    for shape in shapes:
        name = shape.name
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            msg = table_total(rows)
            if msg:
                found.append(("formula", "warning", name, f"table '{name}': {msg}"))
            for row in rows:
                for severity, msg in text_findings(" ".join(row)):
                    found.append(("formula", severity, name, f"table '{name}': {msg}"))
        elif getattr(shape, "has_chart", False) and shape.has_chart:
            found += [("formula", "warning", name, msg) for msg in chart_labels(shape.chart)]
        elif shape.has_text_frame:
            for p in shape.text_frame.paragraphs:  # a claim is one paragraph: bullets are separate points
                for severity, msg in text_findings(p.text):
                    found.append(("formula", severity, name, f"'{name}': {msg}: check the numbers"))
    return found
