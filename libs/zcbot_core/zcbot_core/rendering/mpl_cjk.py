"""matplotlib with a Chinese-capable font: charts whose labels are Chinese draw characters, not tofu.

matplotlib's default font (DejaVu Sans) has no CJK glyphs, so every Chinese label becomes empty
boxes, and it never falls back on its own. `use_cjk_font()` picks an installed CJK font (the
images install fonts-noto-cjk), puts it first in the sans-serif list (DejaVu Sans stays behind it
for symbols the CJK font lacks), and turns off the Unicode minus sign that CJK fonts often miss.
Skills use it from the sandbox mount without importing the rest of the rendering package:

    import sys; sys.path.append("/sandbox/rendering")
    from mpl_cjk import use_cjk_font
    font = use_cjk_font()          # e.g. "Noto Sans CJK SC"; None when no CJK font is installed

Stdlib + matplotlib only (imported lazily), no relative imports.
"""

from __future__ import annotations

import shutil
import subprocess

# Preferred families, best first: Simplified Chinese variants before the JP/TC faces of the same
# collection (same coverage, but mainland glyph shapes), then common fonts of other systems.
PREFERRED = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "Noto Sans CJK JP",
    "Noto Sans CJK TC", "Noto Serif CJK SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Microsoft YaHei",
    "PingFang SC", "Hiragino Sans GB", "Heiti SC", "SimHei", "Sarasa Gothic SC", "AR PL UMing CN",
)
SAMPLE = "中文图表标签"


def _covers(path: str, text: str = SAMPLE) -> bool:
    from matplotlib.ft2font import FT2Font

    try:
        charmap = FT2Font(path).get_charmap()
    except (OSError, RuntimeError):
        return False
    return all(ord(ch) in charmap for ch in text)


def _fontconfig_candidates() -> list[str]:
    """Font files fontconfig knows for Chinese (a font not in matplotlib's cache yet, or a .ttc
    whose first face matplotlib lists under another name)."""
    if not shutil.which("fc-list"):
        return []
    try:
        out = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    files = sorted({line.split(":")[0].strip() for line in out.splitlines() if line.strip()})
    # Sans-serif first, Regular weights first: they read best on charts.
    return sorted(files, key=lambda f: ("Serif" in f or "Mincho" in f, "Regular" not in f, f))


def find_cjk_font() -> tuple[str, str] | None:
    """(family name, font file) of an installed font that draws Chinese, or None."""
    from matplotlib import font_manager

    by_name: dict[str, str] = {}
    for entry in font_manager.fontManager.ttflist:
        by_name.setdefault(entry.name, entry.fname)
    for name in PREFERRED:
        path = by_name.get(name)
        if path and _covers(path):
            return name, path
    for path in _fontconfig_candidates():
        if _covers(path):
            font_manager.fontManager.addfont(path)
            return font_manager.FontProperties(fname=path).get_name(), path
    return None


def use_cjk_font(size: float | None = None) -> str | None:
    """Make matplotlib draw Chinese; returns the family chosen (None: no CJK font installed, the
    caller should say so rather than ship a chart of boxes)."""
    import matplotlib

    found = find_cjk_font()
    if found is None:
        return None
    name, _ = found
    rc = matplotlib.rcParams
    # An explicit family list: matplotlib falls back along it glyph by glyph (DejaVu Sans has the
    # sub/superscript digits of Li₆PS₅Cl that CJK fonts lack).
    rc["font.family"] = [name, "DejaVu Sans"]
    rc["font.sans-serif"] = [name, *[f for f in rc["font.sans-serif"] if f != name]]
    rc["axes.unicode_minus"] = False
    if size:
        rc["font.size"] = size
    return name
