#!/usr/bin/env python3
"""Text measurement for decks (stdlib only): how wide a run is and how tall wrapped text gets.

Calibrated against LibreOffice Impress with Noto Sans CJK + Liberation fonts (the renderer
zcbot uses), measured by laying decks out in LibreOffice and reading the heights back:
- Text boxes and placeholders use font-independent line spacing: every line is 1.2 em, CJK or not
  (PowerPoint does the same).
- Table cells use the fonts' own line heights: a line holding CJK is 1.437 em (Noto Sans CJK,
  the fallback for Microsoft YaHei / SimHei), a Latin line 1.11-1.16 em depending on the family.
  That difference is why a Chinese table renders taller than a 1.2 em estimate and an English
  one shorter.
- Latin advance widths are the real widths of the metric-compatible fonts (Arial = Liberation
  Sans, Times New Roman = Liberation Serif); an unknown font (Calibri without Carlito) renders in
  DejaVu Sans, the widest, which is also the safe guess.
- LibreOffice puts about a fifth of an em between Chinese and Latin neighbours (autospace).
"""

from __future__ import annotations

import re
import unicodedata

EMU_PER_PT = 12700
EMU_PER_IN = 914400
FRAME_LINE = 1.2
CJK_CELL_LINE = 1.437
SCRIPT_GAP = 0.22  # em between CJK and Latin neighbours (LibreOffice's Asian autospace)

# Advance widths (hundredths of an em) of the printable ASCII characters 32..126, per family,
# read from the font files with PIL once (LiberationSans/-Bold, LiberationSerif, DejaVuSans).
_WIDTHS = {
    "sans": "2828355656896719333339582833282856565656565656565656282858585856996767727267617872285067568372786778"
            "726761726794676761282828475633565650565628565622225022835656565633502856507250505033263358",
    "sans_bold": "2833475656897224333339582833282856565656565656565656333358585861987272727267617872285672618372786778"
                 "726761726794676761332833585633566156615633616128285628896161616139563361567856565039283958",
    "serif": "2533415050837818333350562533252850505050505050505050282856565644927267677261567272333972618972725672"
             "675661727294727261332833475033445044504433505028285028785050505033392850507250504448204854",
    "dejavu": "3240468464957827393950843236323464646464646464646464343484848453996869707763587775292966568675796079"
              "696361736899696169393439845050616355636235636328285828976361636341523963598259595264346484",
}
_TABLE = {k: [int(v[i:i + 2]) / 100.0 for i in range(0, len(v), 2)] for k, v in _WIDTHS.items()}
# Bold serif / DejaVu: about 8 % wider than regular (measured on DejaVu Sans Bold, Liberation Serif Bold).
_TABLE["serif_bold"] = [w * 1.08 for w in _TABLE["serif"]]
_TABLE["dejavu_bold"] = [w * 1.08 for w in _TABLE["dejavu"]]
_CELL_LINE = {"sans": 1.117, "sans_bold": 1.117, "serif": 1.107, "serif_bold": 1.107, "dejavu": 1.164, "dejavu_bold": 1.164}
_SANS = ("arial", "helvetica", "liberation sans", "arimo", "microsoft sans serif")
_SERIF = ("times", "liberation serif", "tinos")  # metric-compatible only: Georgia renders as DejaVu Serif


def family(font: str | None, bold: bool = False) -> str:
    """The width table a Latin font renders with."""
    name = (font or "").lower()
    if any(name.startswith(s) for s in _SANS):
        return "sans_bold" if bold else "sans"
    if any(s in name for s in _SERIF):
        return "serif_bold" if bold else "serif"
    return "dejavu_bold" if bold else "dejavu"


def is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def has_cjk(text: str) -> bool:
    return any(is_wide(c) for c in text)


# Kinsoku (避头尾): characters that never start a line, and ones that never end one. Both
# renderers apply these rules; a no-break space or a word joiner glues its neighbours.
NO_START = set("，。、；：！？）」』】》〉〕”’…‥·・ー～%‰℃,.;:!?)]}") | set("ぁぃぅぇぉっゃゅょァィゥェォッャュョ")
NO_END = set("（「『【《〈〔“‘([{")
GLUE = ("\u00a0", "\u2060")


def char_em(ch: str, fam: str = "dejavu") -> float:
    """Advance width of one character in ems."""
    if ch == "\u2060":
        return 0.0
    if ch == "\u00a0":
        ch = " "
    if is_wide(ch):
        return 1.0
    code = ord(ch)
    if 32 <= code <= 126:
        return _TABLE[fam][code - 32]
    if unicodedata.category(ch).startswith("M"):
        return 0.0
    return 0.6


def text_em(text: str, fam: str = "dejavu") -> float:
    return sum(char_em(c, fam) for c in text)


def _tokens(text: str) -> list[str]:
    """Break opportunities: every wide character alone, Latin words with their trailing spaces."""
    tokens: list[str] = []
    word = ""
    for ch in text:
        if is_wide(ch):
            if word:
                tokens.append(word)
                word = ""
            tokens.append(ch)
        elif ch == " ":
            tokens.append(word + ch)
            word = ""
        else:
            word += ch
    if word:
        tokens.append(word)
    return _kinsoku(tokens)


def _kinsoku(tokens: list[str]) -> list[str]:
    """Join tokens that may not be broken apart: closing punctuation to what precedes it,
    opening punctuation to what follows, and anything around a no-break space / word joiner
    ("3.8\u00a0倍" stays one unit)."""
    out: list[str] = []
    for tok in tokens:
        if out and (tok[0] in NO_START or tok[0] in GLUE or out[-1].rstrip(" ")[-1:] in NO_END
                    or out[-1][-1:] in GLUE):
            if not out[-1].endswith(" "):  # a space before it is a real break opportunity
                out[-1] += tok
                continue
        out.append(tok)
    return out


def wrap(text: str, width_emu: int, size_pt: float, fam: str = "dejavu") -> list[str]:
    """The lines `text` breaks into in a column `width_emu` wide (greedy, like both renderers)."""
    em = size_pt * EMU_PER_PT
    out: list[str] = []
    for hard in text.split("\n"):
        line, used = "", 0.0
        prev_wide: bool | None = None
        for tok in _tokens(hard):
            wide = is_wide(tok[0])
            # LibreOffice spaces Asian and non-Asian text apart (autospace, on by default)
            gap = SCRIPT_GAP if prev_wide is not None and wide != prev_wide and line else 0.0
            prev_wide = is_wide(tok[-1])
            w = (text_em(tok, fam) + gap) * em
            visible = (text_em(tok.rstrip(), fam) + gap) * em
            if line and used + visible > width_emu:
                out.append(line)
                line, used = "", 0.0
            if visible > width_emu and width_emu > 0:  # a token longer than the line breaks inside
                for ch in tok:
                    cw = char_em(ch, fam) * em
                    if line and used + cw > width_emu:
                        out.append(line)
                        line, used = "", 0.0
                    line += ch
                    used += cw
                continue
            line += tok
            used += w
        out.append(line)
    return out


_NUM_SPACE_UNIT = re.compile(r"(?<![A-Za-z])(\d(?:[\d.,]*\d)?)[ ](?=[\u3400-\u9fff%‰℃])")
_NUM_UNIT = re.compile(r"(?<![A-Za-z\d.,])(\d(?:[\d.,]*\d)?)(?=[\u3400-\u9fff])")


def glue(text: str) -> str:
    """Numbers kept with their unit: "3.8 倍" gets a no-break space, "3.8倍" a word joiner, so
    neither renderer leaves the unit alone at the start of the next line."""
    text = _NUM_SPACE_UNIT.sub("\\1\u00a0", text)
    return _NUM_UNIT.sub("\\1\u2060", text)


def core(line: str) -> str:
    """A line without spaces, joiners and the punctuation that may not start a line."""
    return "".join(c for c in line if c not in NO_START and c not in GLUE and not c.isspace())


def orphan(lines: list[str]) -> bool:
    """A paragraph whose last line holds one lone CJK character (plus punctuation)."""
    if len(lines) < 2:
        return False
    last = core(lines[-1])
    return len(last) == 1 and is_wide(last)


def per_character(lines: list[str]) -> bool:
    """Text set one character per line (a short label in a column too narrow for it)."""
    cores = [core(ln) for ln in lines if core(ln)]
    return len(cores) >= 2 and all(len(c) <= 1 for c in cores)


def wrapped_lines(text: str, width_emu: int, size_pt: float, fam: str = "dejavu") -> int:
    if width_emu <= 0:
        return max(1, len(text))
    return len(wrap(text, width_emu, size_pt, fam))


def text_height(paragraphs: list[tuple], width_emu: int) -> int:
    """Height in EMU of text-frame paragraphs (text, size_pt, left_margin_emu, space_before_pt
    [, family [, line_spacing]]): 1.2 em lines."""
    total = 0.0
    for i, para in enumerate(paragraphs):
        text, size, margin, before = para[:4]
        fam = para[4] if len(para) > 4 else "dejavu"
        spacing = para[5] if len(para) > 5 else 1.0
        lines = wrapped_lines(text, width_emu - margin, size, fam)
        total += lines * size * FRAME_LINE * spacing * EMU_PER_PT
        if i:
            total += before * EMU_PER_PT
    return int(total)


def cell_height(paragraphs: list[tuple[str, float, str]], width_emu: int) -> int:
    """Height in EMU of a table cell's text (paragraphs as (text, size_pt, family)), each line as
    tall as its fonts make it: CJK lines taller than Latin ones."""
    total = 0.0
    for text, size, fam in paragraphs:
        for line in wrap(text, width_emu, size, fam):
            factor = CJK_CELL_LINE if has_cjk(line) else _CELL_LINE.get(fam, 1.164)
            total += factor * size * EMU_PER_PT
    return int(total)


def is_short_label(text: str) -> bool:
    """Up to six CJK characters (with a few Latin ones): a label that must stay on one line."""
    return has_cjk(text) and len(core(text)) <= 6 and " " not in text.strip()


def column_widths(rows: list[list[str]], total_emu: int, size_pt: float, fam: str = "dejavu",
                  inset_emu: int = 2 * 91440) -> list[int]:
    """Content-sized column widths summing to `total_emu`: a column gets what its longest cell
    needs on one line when everything fits; otherwise short columns keep their natural width
    (a label like "项目" stays on one line, a formula is not broken) and the long ones share the
    rest in proportion to their text."""
    ncols = max(len(r) for r in rows)
    em = size_pt * EMU_PER_PT
    natural = []
    longest_word = []
    for c in range(ncols):
        cells = [r[c] for r in rows if c < len(r)]
        natural.append(max(text_em(x, fam) * em for x in cells) + inset_emu)
        # a short label ("项目", "背景与目标") is one unit: it is never broken per character
        words = [x for x in cells if is_short_label(x)] + [w for x in cells if not is_short_label(x) for w in _tokens(x)]
        longest_word.append(max([text_em(w.rstrip(), fam) * em for w in words] or [0]) + inset_emu)
    floor = [max(min(n, total_emu * 0.9 / ncols), lw) for n, lw in zip(natural, longest_word)]
    if sum(natural) <= total_emu:
        spare = total_emu - sum(natural)
        widths = [n + spare * n / sum(natural) for n in natural]
    else:
        fixed = [i for i in range(ncols) if natural[i] <= total_emu / ncols]
        flex = [i for i in range(ncols) if i not in fixed]
        rest = total_emu - sum(natural[i] for i in fixed)
        widths = list(natural)
        weight = sum(natural[i] for i in flex) or 1
        for i in flex:
            widths[i] = max(floor[i], rest * natural[i] / weight)
        scale = total_emu / sum(widths)
        widths = [w * scale for w in widths]
    out = [int(w) for w in widths]
    out[-1] += total_emu - sum(out)
    return out
