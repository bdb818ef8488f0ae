"""Chemical formulas by rule (`rendering/formulas.py`): what becomes a subscript and what stays as
written, and the document writer using it."""

from __future__ import annotations

import pytest
from docx import Document

from zcbot_core.rendering import markdown_to_docx
from zcbot_core.rendering.formulas import has_formula, split_formulas, to_unicode

FORMULAS = {
    "Li6PS5Cl": "Li₆PS₅Cl", "Li10GeP2S12": "Li₁₀GeP₂S₁₂", "LiNbO3": "LiNbO₃", "H2O": "H₂O",
    "Li7La3Zr2O12": "Li₇La₃Zr₂O₁₂", "Ca(OH)2": "Ca(OH)₂", "(NH4)2SO4": "(NH₄)₂SO₄", "CH3COOH": "CH₃COOH",
    "CuSO4·5H2O": "CuSO₄·5H₂O", "2H2 + O2 → 2H2O": "2H₂ + O₂ → 2H₂O", "C60": "C₆₀",
    "氢气（H2）与CO2反应": "氢气（H₂）与CO₂反应", "LiNbO3-coated": "LiNbO₃-coated", "Li2S-P2S5": "Li₂S-P₂S₅",
    "Li6PS5Cl-聚合物": "Li₆PS₅Cl-聚合物", "Al2O3, TiO2。": "Al₂O₃, TiO₂。",
    "Fe3+ 与 Cu2+": "Fe³⁺ 与 Cu²⁺", "NH4+": "NH₄⁺", "NO3-": "NO₃⁻",
    # Decimal stoichiometry, the halogen placeholder, ions without a count (issue 38).
    "Li3.25Ge0.25P0.75S4": "Li₃.₂₅Ge₀.₂₅P₀.₇₅S₄", "LiNi0.8Co0.1Mn0.1O2": "LiNi₀.₈Co₀.₁Mn₀.₁O₂",
    "Li1.3Al0.3Ti1.7(PO4)3": "Li₁.₃Al₀.₃Ti₁.₇(PO₄)₃", "Li5.5PS4.5Cl1.5。": "Li₅.₅PS₄.₅Cl₁.₅。", "Li6PS5X": "Li₆PS₅X",
    "Li+ 传导": "Li⁺ 传导", "3.0 V vs. Li/Li+": "3.0 V vs. Li/Li⁺", "Na+、K+": "Na⁺、K⁺", "Cl- 与 OH-": "Cl⁻ 与 OH⁻",
    "LiCoO2. Next": "LiCoO₂. Next",
}
UNCHANGED = [
    "PM2.5", "PM10", "H100", "A100", "B200", "GPT4", "GPT-4o", "Qwen2-VL", "DeepSeek-V3", "Kimi-K2", "Python3",
    "2024", "2025H2", "H2 2025", "2025年H2", "v1.2", "V2.5", "ISO9001", "B2B", "P2P", "O2O", "I2C", "KN95", "N95",
    "H7N9", "H1N1", "COP28", "USB3", "PS5", "K8s", "COVID-19", "5G", "3D", "Windows11", "S3", "SCI1区",
    "https://example.org/CO2", "data/H2O.csv", "a@b.com", "CO", "NaCl",
    "C++", "C# 与 C++", "评级 B+", "A+", "I-V 曲线", "Li1.0", "Li0.50", "X2", "PX2", "GPT4.5", "Qwen2.5", "NCM811",
]


@pytest.mark.parametrize("text,expected", sorted(FORMULAS.items()))
def test_formulas_get_subscripts(text, expected):
    assert to_unicode(text) == expected
    assert "".join(piece for piece, _ in split_formulas(text)) == text


@pytest.mark.parametrize("text", UNCHANGED)
def test_exceptions_stay_as_written(text):
    assert split_formulas(text) == [(text, "")]
    assert not has_formula(text)


def test_pieces_are_merged_runs():
    assert split_formulas("用Li6PS5Cl电解质") == [("用Li", ""), ("6", "sub"), ("PS", ""), ("5", "sub"),
                                                 ("Cl电解质", "")]
    assert split_formulas("Fe3+") == [("Fe", ""), ("3+", "sup")]


def test_documents_use_the_rule(tmp_path):
    md = "# 标题\n\n硫化物 Li6PS5Cl 与 LiNbO3 包覆层，PM2.5 与 H100 不变，`H2O` 代码不变。\n"
    markdown_to_docx(md, tmp_path / "f.docx", profile="proposal")
    runs = [r for p in Document(str(tmp_path / "f.docx")).paragraphs for r in p.runs]
    subs = [r.text for r in runs if r.font.subscript]
    assert subs == ["6", "5", "3"]
    text = "".join(r.text for r in runs)
    assert "PM2.5" in text and "H100" in text and "H2O" in text
