#!/usr/bin/env python3
"""Typesetting decisions the builder makes after the text is set (python-pptx + stdlib): a
paragraph whose last line would hold one lone CJK character gets a right indent of an em or
two, so the line before gives it a companion (same number of lines). Measured with
deck_measure, the checker's measure, so what the builder avoids the checker does not report.
"""

from __future__ import annotations

import deck_inherit as inh
import deck_measure as dm

INSET_LR = 91440


def no_orphans(shape, family, heading: bool = False) -> None:
    """Reads the paragraphs as they are (sizes, bold, indents): call it again after changing
    them. `family(bold)` names the width table of the deck's font."""
    if shape.width is None:
        return
    tf = shape.text_frame
    inner = int(shape.width) - int(tf.margin_left if tf.margin_left is not None else INSET_LR) \
        - int(tf.margin_right if tf.margin_right is not None else INSET_LR)
    for p in tf.paragraphs:
        runs = [r for r in p.runs if r.text]
        if not runs:
            continue
        ppr = p._p.get_or_add_pPr()
        ppr.attrib.pop("marR", None)
        level = p.level or 0
        sizes = [r.font.size.pt for r in runs if r.font.size is not None]
        z = max(sizes) if sizes else (inh.inherited(shape, level, "sz") or 18.0)
        fam = family(any(r.font.bold for r in runs))
        indent = int((0.375 + 0.42 * level) * 914400) if shape.is_placeholder and not heading else 0
        avail = inner - int(ppr.get("marL") or indent)
        text = "".join(r.text for r in runs)
        if avail < 3 * z * dm.EMU_PER_PT:
            continue
        lines = dm.wrap(text, avail, z, fam)
        if not dm.orphan(lines):
            continue
        for ems in (1, 2, 3):
            pushed = dm.wrap(text, avail - int(ems * z * dm.EMU_PER_PT), z, fam)
            if len(pushed) == len(lines) and not dm.orphan(pushed):
                ppr.set("marR", str(int(ems * z * dm.EMU_PER_PT)))
                break
