#!/usr/bin/env python3
"""What a bullets slide really holds, and the layout a designer would give it (stdlib only).

An outline slide without a `type` whose bullets are
- 2-4 short items each carrying one headline number ("季度收入：15.4 亿", "41% gross margin",
  "毛利率 41.2%") becomes KPI cards (`kpis`), also with one sentence before or after them (that
  sentence goes under the cards);
- 2-6 items led by a date or period ("2025 Q1：…", "10 月：…") a `timeline`;
- 2-6 numbered steps ("第一步：…", "Step 2: …") a `process`;
- one quoted sentence with its source (“…” —— 某某) a `quote`;
- 2 heads with their sub-points a `comparison`, 3-4 heads with sub-points `cards`;
otherwise it stays a list. A slide with a `type` (also `"type": "bullets"`) is never changed:
the outline can always force a kind.
"""

from __future__ import annotations

import re

from deck_outline import norm_bullets

NUM = r"[+\-−±~≈]?\d[\d,]*(?:\.\d+)?\s?(?:%|‰|倍|亿元|亿|万元|万|元|个百分点|pp|pts?|x|bn|m|k|天|家|人|次)?"
KPI_LEAD = re.compile(rf"^\s*(?P<value>{NUM})\s+(?P<label>[^\d\s].{{0,28}})$", re.I)
KPI_TAIL = re.compile(rf"^\s*(?P<label>[^\d：:]{{1,18}})[：:]\s*(?P<value>{NUM})\s*(?:[，,(（]\s*(?P<note>[^)）]{{1,24}})[)）]?)?$", re.I)
KPI_SPACE = re.compile(rf"^\s*(?P<label>[^\d：:，,]{{1,12}}?)\s*(?P<value>{NUM})\s*(?:[，,]\s*(?P<note>[^，,]{{1,20}}))?$", re.I)
DATE = re.compile(r"^\s*(?P<label>\d{4}\s*年?\s*(?:Q[1-4]|H[12]|\d{1,2}\s*月)?|Q[1-4](?:\s*\d{4})?|\d{1,2}\s*月"
                  r"|第[一二三四五六七八九十\d]+(?:阶段|季度|周|个月|月))\s*[：:\-–—]\s*(?P<title>.+)$", re.I)
STEP = re.compile(r"^\s*(?:第[一二三四五六七八九十\d]+步|步骤\s*\d+|step\s*\d+)\s*[：:.\-–—]?\s*(?P<title>.+)$", re.I)
QUOTE = re.compile(r"^\s*[“\"「『](?P<quote>.+)[”\"」』]\s*(?:[—–-]{1,2}\s*(?P<source>.+))?$")
KEEP = ("title", "notes", "source", "takeaway")


def _kpi(text: str) -> dict | None:
    m = KPI_TAIL.match(text) or KPI_LEAD.match(text) or KPI_SPACE.match(text)
    if not m or len(text) > 40 or len(re.findall(r"\d+(?:\.\d+)?", text)) > 2 or re.search(r"[：:]", m.group("label")):
        return None
    item = {"value": m.group("value").strip(), "label": m.group("label").strip(" ：:，,")}
    if m.groupdict().get("note"):
        item["note"] = m.group("note").strip()
    return item


def _step(title: str, **extra) -> dict:
    """A step's short head and the rest as its text ("客户门户 2.0，自助开通与账单")."""
    head, sep, rest = (re.split(r"([，,；;—])", title, maxsplit=1) + ["", ""])[:3]
    if sep and len(head) <= 16 and rest.strip():
        return {**extra, "title": head.strip(), "text": rest.strip()}
    return {**extra, "title": title.strip()}


def _base(s: dict) -> dict:
    return {k: s[k] for k in KEEP if k in s}


def classify(s: dict) -> dict:
    """The slide as it should be laid out: the same dict, or a new one of a designed kind."""
    if s.get("type") or any(k in s for k in ("chart", "table", "image", "kpis", "cards", "quote", "steps", "left", "right")):
        return s
    try:
        paras = norm_bullets(s.get("bullets"), "")
    except ValueError:
        return s
    if not paras:
        return s
    tops = [t for t, level in paras if level == 0]
    if len(tops) != len(paras):  # heads with sub-points
        groups: list[tuple[str, list[str]]] = []
        for text, level in paras:
            if level == 0:
                groups.append((text, []))
            elif groups:
                groups[-1][1].append(text)
        if all(children for _, children in groups) and all(len(h) <= 24 for h, _ in groups):
            if len(groups) == 2:
                (lt, left), (rt, right) = groups
                return {**_base(s), "type": "comparison", "left_title": lt, "left": left, "right_title": rt, "right": right}
            if 3 <= len(groups) <= 4:
                return {**_base(s), "type": "cards", "cards": [{"title": h, "bullets": c} for h, c in groups]}
        return s
    if 2 <= len(tops) <= 6:
        dates = [DATE.match(t) for t in tops]
        if all(dates):
            return {**_base(s), "type": "timeline",
                    "steps": [_step(m.group("title"), label=m.group("label").strip()) for m in dates]}
        steps = [STEP.match(t) for t in tops]
        if all(steps):
            return {**_base(s), "type": "process", "steps": [_step(m.group("title")) for m in steps]}
    if 2 <= len(tops) <= 5:
        kpis = [_kpi(t) for t in tops]
        if all(kpis) and len(kpis) <= 4:
            return {**_base(s), "type": "kpis", "kpis": kpis}
        # numbers plus one sentence (first or last): the numbers as cards, the sentence under them
        rest = [t for t, k in zip(tops, kpis) if not k]
        if len(rest) == 1 and 2 <= len(tops) - 1 <= 4 and rest[0] in (tops[0], tops[-1]) and not s.get("takeaway"):
            return {**_base(s), "type": "kpis", "kpis": [k for k in kpis if k], "takeaway": rest[0]}
    if len(tops) == 1:
        m = QUOTE.match(tops[0])
        if m and m.group("source"):
            return {**_base(s), "type": "quote", "quote": m.group("quote").strip(), "source": m.group("source").strip()}
    return s
