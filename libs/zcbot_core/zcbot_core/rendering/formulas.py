"""Chemical formulas by rule: which digits in running text are subscripts (Li6PS5Cl -> Li₆PS₅Cl).

Stdlib only and free of relative imports, so documents (`common.add_spans`), slides
(skills/ppt, loaded from the sandbox mount `/sandbox/rendering/formulas.py`) and chart labels all
use the one rule:

- A candidate is a word of letters, digits and brackets (not touching other letters, digits or
  `_`, not followed by `.digit`, not inside a URL, e-mail or path).
- It is a formula when it parses completely as element symbols (the periodic table, case
  sensitive: `Co` is cobalt, `CO` carbon + oxygen), each with an optional count 2..99 (a written
  `1` or a leading zero means it is not a formula), with brackets `(OH)2`, and at least one count.
- One element alone (`H100`, `V3`, `B200`, `K2`, `N95`) is a formula only for the common
  molecules `SINGLE_ELEMENT` (H2, O2, O3, N2, Cl2, ...): GPUs, model names and grades look
  exactly like single elements with counts.
- Named exceptions that parse but are not chemistry: `NOT_FORMULAS` (B2B, P2P, I2C, KN95, PS5,
  USB3, ...), patterns `COP28`, influenza `H7N9`, and `H1`/`H2` next to a year (2025H2, H2 2025).
- A charge written after the formula: `Fe3+`, `Cu2+` (one element: the count is the charge,
  superscript), `NH4+`, `NO3-` (counts stay subscripts, the sign is superscript).
- A hydrate or equation coefficient (`CuSO4·5H2O`, `2H2O`) stays normal text.
- Decimal counts in a formula of two or more elements (`Li3.25Ge0.25P0.75S4`, `LiNi0.8Co0.1Mn0.1O2`,
  `Li1.3Al0.3Ti1.7(PO4)3`); `X` stands for a halogen in a formula of two or more elements (`Li6PS5X`).
- A common ion without a count takes its charge as a superscript (`Li+`, `Na+`, `Cl-`, `OH-`:
  `COUNTLESS_IONS`); `C++`, `B+` and other signs stay as written.
So `PM2.5`, `GPT4`, `Qwen2`, `H100`, `DeepSeek-V3`, `ISO9001`, `2024` and `v1.2` stay as written.
A writer who needs something else uses explicit `H~2~O` / `x^2^` markup or a `code` span.
"""

from __future__ import annotations

import re

ELEMENTS = frozenset(
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr "
    "Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm "
    "Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No "
    "Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og".split()
)
# Single-element molecules common in text; any other "symbol + number" is a product or model name.
SINGLE_ELEMENT = frozenset("H2 O2 O3 N2 Cl2 F2 Br2 I2 C60 C70 S8".split())
# Parse as formulas but are business terms, buses, standards, products.
NOT_FORMULAS = frozenset(
    "B2B B2C C2C C2B C2M B2G O2O P2P F2F P2C B2B2C I2C I2S KN95 KF94 FFP2 FFP3 PS2 PS3 PS4 PS5 USB2 USB3 "
    "USB4 CS2GO".split()
)
# Ions written without a count whose sign is a charge: 'Li+' is Li⁺, but 'B+' is a grade and 'C++' a language.
COUNTLESS_IONS = frozenset("H Li Na K Rb Cs Ag Cu Tl F Cl Br I OH CN SCN".split())
_NOT_PATTERNS = re.compile(r"^(?:COP\d+|H\d+N\d+|IF\d+)$")
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9_])(?P<coef>[1-9]\d?)?(?P<body>[A-Z(\[](?:[A-Za-z0-9()\[\]]|\.(?=\d))*)(?![A-Za-z0-9_])")
_SYMBOL_COUNT = re.compile(r"([A-Z][a-z]?)|([(\[])|([)\]])|(\d+(?:\.\d+)?)")
_YEAR_BEFORE = re.compile(r"(?:19|20)\d\d\s*年?\s*$")
_YEAR_AFTER = re.compile(r"^\s*(?:19|20)\d\d")
_WORDLIKE = re.compile(r"[A-Za-z0-9_\u3400-\u9fff]")  # 'CO2-based', 'Li6PS5Cl-聚合物': a hyphen, not a charge
_URLISH = re.compile(r"://|www\.|@|\\|^/|/\S*\.[A-Za-z]{2,4}$")  # a URL, e-mail or file path (Li6PS5Cl/LiCoO2 is text)
_SUB_DIGITS = str.maketrans("0123456789+-−", "₀₁₂₃₄₅₆₇₈₉₊₋₋")
_SUP_DIGITS = str.maketrans("0123456789+-−", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻")

NORMAL, SUB, SUP = "", "sub", "sup"


def _parse(body: str) -> list[tuple[str, str]] | None:
    """Pieces (text, kind) when `body` is entirely a formula with at least one count, else None."""
    pieces: list[tuple[str, str]] = []
    depth, pos, symbols, counts, decimals, prev = 0, 0, 0, 0, 0, ""
    for m in _SYMBOL_COUNT.finditer(body):
        if m.start() != pos:
            return None  # a stray lowercase letter: not made of element symbols
        pos = m.end()
        symbol, opening, closing, count = m.groups()
        if symbol:
            if symbol not in ELEMENTS and symbol != "X":
                return None
            symbols += 1
            pieces.append((symbol, NORMAL))
            prev = "symbol"
        elif opening:
            depth += 1
            pieces.append((opening, NORMAL))
            prev = "open"
        elif closing:
            depth -= 1
            if depth < 0 or prev == "open":
                return None
            pieces.append((closing, NORMAL))
            prev = "close"
        else:
            if prev not in ("symbol", "close") or not _count_ok(count):
                return None
            decimals += "." in count
            counts += 1
            pieces.append((count, SUB))
            prev = "count"
    if pos != len(body) or depth != 0 or not counts or not symbols:
        return None
    names = {p for p, kind in pieces if kind == NORMAL and p[0].isalpha()}
    if (decimals or "X" in names) and len(names - {"X"}) < 2:
        return None  # 'V2.5', 'PX2': a decimal count or a placeholder only in a real compound
    return pieces


def _count_ok(count: str) -> bool:
    """2..99, or a decimal 0.01..99 (Li3.25, Co0.1); '1', '007', '1.0' are not counts."""
    if "." in count:
        whole, frac = count.split(".")
        return not (len(whole) > 1 and whole.startswith("0")) and 0 < float(count) < 100 and not frac.endswith("0")
    return not count.startswith("0") and 2 <= int(count) <= 99


def _trim_brackets(body: str) -> tuple[str, str, str]:
    """Unbalanced outer brackets belong to the sentence, not the formula: '(CO2' -> '(', 'CO2', ''."""
    lead = trail = ""
    while body and body[0] in "([" and body.count("(") + body.count("[") > body.count(")") + body.count("]"):
        lead, body = lead + body[0], body[1:]
    while body and body[-1] in ")]" and body.count(")") + body.count("]") > body.count("(") + body.count("["):
        trail, body = body[-1] + trail, body[:-1]
    return lead, body, trail


def _word_around(text: str, start: int, end: int) -> str:
    left = start
    while left > 0 and not text[left - 1].isspace():
        left -= 1
    right = end
    while right < len(text) and not text[right].isspace():
        right += 1
    return text[left:right]


def _formula_pieces(text: str, start: int, end: int, body: str) -> list[tuple[str, str]] | None:
    if body in NOT_FORMULAS or _NOT_PATTERNS.match(body):
        return None
    if text[end:end + 1] == "." and text[end + 1:end + 2].isdigit():
        return None  # PM2.5, V2.5: a decimal number, not a count
    if _URLISH.search(_word_around(text, start, end)):
        return None
    pieces = _parse(body)
    if pieces is None:
        charge = _charge_after(text, end)
        return [(body, NORMAL), (charge, SUP)] if charge and body in COUNTLESS_IONS else None
    symbols = [p for p, kind in pieces if kind == NORMAL and p[0].isalpha()]
    charge = _charge_after(text, end)
    if len(symbols) == 1 and charge and pieces[-1][1] == SUB and len(pieces) == 2:
        return [pieces[0], (pieces[1][0] + charge, SUP)]  # Fe3+ -> Fe³⁺
    if len(symbols) == 1 and body not in SINGLE_ELEMENT:
        return None
    if body in ("H1", "H2") and (_YEAR_BEFORE.search(text[:start]) or _YEAR_AFTER.match(text[end:])):
        return None  # the second half of a year
    if charge:
        pieces.append((charge, SUP))
    return pieces


def _charge_after(text: str, end: int) -> str:
    """'+' / '-' right after the formula and then nothing word-like: an ion's charge."""
    sign, after = text[end:end + 1], text[end + 1:end + 2]
    if sign in ("+", "-", "−") and not _WORDLIKE.match(after) and not (after and after in "+-−#"):
        return sign
    return ""


def split_formulas(text: str) -> list[tuple[str, str]]:
    """`text` cut into (piece, kind) with kind '' (normal), 'sub' or 'sup'; the pieces join to `text`.

    Adjacent pieces of the same kind are merged, so a caller adds one run per piece."""
    out: list[tuple[str, str]] = []
    pos = 0

    def emit(piece: str, kind: str) -> None:
        if not piece:
            return
        if out and out[-1][1] == kind:
            out[-1] = (out[-1][0] + piece, kind)
        else:
            out.append((piece, kind))

    for m in _CANDIDATE.finditer(text):
        lead, body, trail = _trim_brackets(m.group("body"))
        start = m.start("body") + len(lead)
        end = start + len(body)
        pieces = _formula_pieces(text, start, end, body) if body else None
        if pieces is None:
            continue
        charge = pieces[-1][0] if pieces[-1][1] == SUP and pieces[-1][0][-1:] in "+-−" else ""
        sign_len = 1 if charge else 0
        emit(text[pos:start], NORMAL)
        for piece, kind in pieces:
            emit(piece, kind)
        pos = end + sign_len
    emit(text[pos:], NORMAL)
    return out


def has_formula(text: str) -> bool:
    return any(kind for _, kind in split_formulas(text))


def to_unicode(text: str) -> str:
    """Formulas written with Unicode sub/superscript digits (Li₆PS₅Cl, Fe³⁺): for chart labels,
    file names and other places without rich text runs."""
    return "".join(piece.translate(_SUB_DIGITS) if kind == SUB else piece.translate(_SUP_DIGITS) if kind == SUP
                   else piece for piece, kind in split_formulas(text))
