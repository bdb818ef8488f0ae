"""The matplotlib CJK helper (`rendering/mpl_cjk.py`): a chart with Chinese labels draws glyphs,
not tofu, and the helper loads from the rendering folder alone, as the sandbox scripts load it."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from skillkit import RENDERING

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is in the test extra and the sandbox image")
matplotlib.use("Agg")

from matplotlib import font_manager, pyplot  # noqa: E402
from matplotlib.ft2font import FT2Font  # noqa: E402

from zcbot_core.rendering import mpl_cjk  # noqa: E402

LABELS = ["离子电导率", "界面阻抗", "循环寿命"]
TITLE = "硫化物电解质性能对比（Li₆PS₅Cl）"


def _draw(path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig, ax = pyplot.subplots(figsize=(4, 3), dpi=80)
        ax.bar(LABELS, [3.2, 1.5, 2.4])
        ax.set_title(TITLE)
        ax.set_ylabel("相对值（−1 基准）")
        fig.savefig(path)
        pyplot.close(fig)
    return [str(w.message) for w in caught if "missing from" in str(w.message)]


def test_chinese_labels_render_without_tofu(tmp_path):
    if mpl_cjk.find_cjk_font() is None:
        pytest.skip("no CJK font installed here (the images install fonts-noto-cjk)")
    with matplotlib.rc_context():
        matplotlib.rcParams["font.family"] = ["DejaVu Sans"]
        assert _draw(tmp_path / "before.png"), "the default font should miss Chinese glyphs (tofu)"
        family = mpl_cjk.use_cjk_font()
        assert family is not None and (family in mpl_cjk.PREFERRED or "CJK" in family)
        path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        charmap = FT2Font(path).get_charmap()
        assert all(ord(ch) in charmap for ch in "".join(LABELS) + "硫化物电解质性能对比")
        assert _draw(tmp_path / "after.png") == []  # every glyph found: CJK font, DejaVu for ₆ ₅
        assert matplotlib.rcParams["axes.unicode_minus"] is False
    assert (tmp_path / "after.png").stat().st_size > 2000


def test_helper_loads_from_the_folder_alone(tmp_path):
    code = ("import sys; sys.path.append(sys.argv[1]); import matplotlib; matplotlib.use('Agg'); "
            "from mpl_cjk import use_cjk_font; print(use_cjk_font())")
    proc = subprocess.run([sys.executable, "-c", code, str(RENDERING)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(mpl_cjk.use_cjk_font())
