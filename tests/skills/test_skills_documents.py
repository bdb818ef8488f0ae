"""The proposal and brief skills' scripts on fixed inputs, read back with python-docx; the task
constitution naming script; PDF export of deck and manuscript through LibreOffice."""

from __future__ import annotations

import re
import subprocess
from datetime import date

import pytest
from docx import Document
from docx.oxml.ns import qn
from skillkit import SKILLS, have_office, run_script

from zcbot_core.workspace.constitution import constitution_block, constitution_filename, short_id

BUILD = SKILLS / "proposal" / "scripts" / "build_proposal.py"
SPEC = SKILLS / "proposal" / "scripts" / "spec_file.py"
BRIEF = SKILLS / "brief" / "scripts" / "render_brief.py"


def _fonts(rpr) -> dict[str, str]:
    rfonts = rpr.find(qn("w:rFonts"))
    assert rfonts is not None
    return {k.split("}")[1]: v for k, v in rfonts.attrib.items()}


def test_proposal_manuscript(proposal_run):
    path, run = proposal_run
    assert run.returncode == 0, run.text
    assert "4 headings, 1 tables, 1 figures, 3 references" in run.stdout
    assert "placeholders still to fill: 1" in run.stdout
    doc = Document(str(path))
    paras = doc.paragraphs

    # Title block, numbered headings with real heading styles.
    assert paras[0].style.name == "Title" and "CO" in paras[0].text
    headings = [(p.style.name, p.text) for p in paras if p.style.name.startswith("Heading")]
    assert headings == [("Heading 1", "一、立项依据"), ("Heading 2", "（一）研究现状"),
                        ("Heading 1", "二、研究方案"), ("Heading 1", "参考文献")]

    # Fonts: Latin Times New Roman + East Asian SimSun for the body, SimHei for headings, no theme fonts.
    normal = _fonts(doc.styles["Normal"].element.rPr)
    assert normal["ascii"] == "Times New Roman" and normal["hAnsi"] == "Times New Roman"
    assert normal["eastAsia"] == "SimSun"
    assert not any(k.endswith("Theme") for k in normal)
    heading = _fonts(doc.styles["Heading 1"].element.rPr)
    assert heading["eastAsia"] == "SimHei" and heading["ascii"] == "Times New Roman"
    defaults = doc.styles.element.find(qn("w:docDefaults"))
    assert _fonts(defaults.find(qn("w:rPrDefault")).find(qn("w:rPr")))["eastAsia"] == "SimSun"
    assert doc.styles["Normal"].font.size.pt == 12

    # The table with its caption above, three-line borders, header row.
    assert len(doc.tables) == 1
    table = doc.tables[0]
    assert [c.text for c in table.rows[0].cells] == ["材料", "吸附量 (mmol/g)", "选择性"]
    assert table.cell(2, 0).text == "MOF-74"
    borders = table._tbl.tblPr.find(qn("w:tblBorders"))
    assert borders.find(qn("w:top")).get(qn("w:sz")) == "12"
    assert borders.find(qn("w:insideV")).get(qn("w:val")) == "nil"
    captions = [p.text for p in paras if p.style.name == "Caption"]
    assert captions[0].startswith("表 1") and "代表性吸附材料性能对比" in captions[0]
    assert captions[1].startswith("图 1") and "技术路线图" in captions[1]

    # The figure is embedded; CO2 got a real subscript; references numbered.
    assert len(doc.inline_shapes) == 1
    assert any(r.text == "2" and r.font.subscript for p in paras for r in p.runs)
    refs = [p.text for p in paras if re.match(r"^\[\d\] ", p.text)]
    assert len(refs) == 3 and refs[0].startswith("[1] Smith J")
    body = next(p for p in paras if p.text.startswith("二氧化碳捕集"))
    assert body.paragraph_format.first_line_indent.pt == 24  # two characters


def test_proposal_reports_missing_citation_and_figure(task_folder):
    (task_folder / "extra").mkdir(exist_ok=True)
    (task_folder / "extra" / "01.md").write_text("## 方法\n\n见文献[7]。\n\n![缺图](nowhere.png)\n\n## 参考文献\n\n- A. B. 2020.\n",
                                                 encoding="utf-8")
    run = run_script(BUILD, "extra/", "--out", "extra.docx", cwd=task_folder)
    assert run.returncode == 1
    assert "[7]" in run.stdout and "nowhere.png" in run.stdout
    assert (task_folder / "extra.docx").is_file()


def test_paper_profile_numbers_decimally(task_folder):
    (task_folder / "paper.md").write_text("# A Study\n\n## Introduction\n\nText.\n\n### Background\n\nMore.\n\n## Method\n\nX.\n")
    run = run_script(BUILD, "paper.md", "--out", "paper.docx", "--profile", "paper", cwd=task_folder)
    assert run.returncode == 0, run.text
    doc = Document(str(task_folder / "paper.docx"))
    assert doc.paragraphs[0].text == "A Study"
    assert [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")] == ["1 Introduction", "1.1 Background", "2 Method"]


def test_constitution_files(task_folder):
    task_id = "3f9a2c1b-0000-4000-8000-000000000000"
    sid = short_id(task_id)
    assert sid == "3f9a2c1b"
    run = run_script(SPEC, "new", "--short-id", sid, "--name", "国自然 申报", "--create", cwd=task_folder)
    assert run.returncode == 0, run.text
    name = run.stdout.strip()
    assert name == constitution_filename(task_id, "国自然 申报")  # script and prompt agree
    assert name == f"{date.today().isoformat()}-3f9a2c1b-国自然-申报.spec.md"
    assert (task_folder / name).read_text(encoding="utf-8").startswith("# Spec")
    # An older spec and another task's newer spec: the current one is this task's latest.
    (task_folder / "2020-01-01-3f9a2c1b-old.spec.md").write_text("old")
    (task_folder / "2099-01-01-ffffffff-other.spec.md").write_text("other task")
    run = run_script(SPEC, "current", "--short-id", sid, cwd=task_folder)
    assert run.stdout.strip() == name
    block = constitution_block(task_id, "国自然 申报")
    assert "3f9a2c1b" in block and "sorts last" in block
    run = run_script(SPEC, "current", "--short-id", "nothex!!", cwd=task_folder)
    assert run.returncode != 0


@pytest.mark.skipif(not have_office(), reason="LibreOffice (soffice) and pdftoppm are not installed on this machine")
def test_brief_docx_and_pdf(task_folder):
    run = run_script(BRIEF, "brief.md", cwd=task_folder)
    assert run.returncode == 0, run.text
    doc = Document(str(task_folder / "brief.docx"))
    assert doc.paragraphs[0].text == "研发周报 · 第 27 周"
    assert [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")] == ["本周要点", "关键指标", "来源"]
    assert _fonts(doc.styles["Normal"].element.rPr)["eastAsia"] == "Microsoft YaHei"
    assert doc.tables[0].cell(1, 1).text == "12,400"
    pdf = task_folder / "brief.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"


def test_deck_and_manuscript_convert_to_pdf(pdfs):
    for key in ("deck_pdf", "proposal_pdf"):
        assert pdfs[key].read_bytes()[:5] == b"%PDF-"
    for key in ("deck_png", "proposal_png"):
        data = pdfs[key].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    # One PDF page per slide.
    info = subprocess.run(["pdfinfo", str(pdfs["deck_pdf"])], capture_output=True, text=True, timeout=30).stdout
    assert re.search(r"^Pages:\s+8$", info, re.M), info


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
SCHEMA_ORDER = {
    W + "pPr": "pStyle keepNext keepLines pageBreakBefore framePr widowControl numPr suppressLineNumbers pBdr shd tabs "
               "suppressAutoHyphens kinsoku wordWrap overflowPunct topLinePunct autoSpaceDE autoSpaceDN bidi "
               "adjustRightInd snapToGrid spacing ind contextualSpacing mirrorIndents suppressOverlap jc textDirection "
               "textAlignment textboxTightWrap outlineLvl divId cnfStyle rPr sectPr pPrChange",
    W + "rPr": "rStyle rFonts b bCs i iCs caps smallCaps strike dstrike outline shadow emboss imprint noProof snapToGrid "
               "vanish webHidden color spacing w kern position sz szCs highlight u effect bdr shd fitText vertAlign rtl "
               "cs em lang eastAsianLayout specVanish oMath",
    W + "tblPr": "tblStyle tblpPr tblOverlap bidiVisual tblStyleRowBandSize tblStyleColBandSize tblW jc tblCellSpacing "
                 "tblInd tblBorders shd tblLayout tblCellMar tblLook tblCaption tblDescription tblPrChange",
    W + "tcPr": "cnfStyle tcW gridSpan hMerge vMerge tcBorders shd noWrap tcMar textDirection tcFitText vAlign hideMark",
    W + "tblBorders": "top left start bottom right end insideH insideV",
    A + "pPr": "lnSpc spcBef spcAft buClrTx buClr buSzTx buSzPct buSzPts buFontTx buFont buNone buAutoNum buChar buBlip "
               "tabLst defRPr extLst",
    A + "rPr": "ln noFill solidFill gradFill blipFill pattFill grpFill effectLst effectDag highlight uLnTx uLn uFillTx "
               "uFill latin ea cs sym hlinkClick hlinkMouseOver rtl extLst",
}


def test_generated_xml_children_in_schema_order(deck_run, proposal_run, task_folder):
    """Word and PowerPoint reject some out-of-order XML that LibreOffice tolerates: check our edits."""
    import zipfile

    from lxml import etree

    run = run_script(BRIEF, "brief.md", "--docx", "order-brief.docx", cwd=task_folder)
    assert run.returncode == 0, run.text
    files = [deck_run[0], proposal_run[0], task_folder / "order-brief.docx"]
    for path in files:
        with zipfile.ZipFile(path) as z:
            for part in z.namelist():
                if not part.endswith(".xml") or not part.startswith(("word/", "ppt/slides/", "ppt/slideLayouts/")):
                    continue
                root = etree.fromstring(z.read(part))
                for tag, order_text in SCHEMA_ORDER.items():
                    ns = tag.split("}")[0] + "}"
                    order = order_text.split()
                    for el in root.iter(tag):
                        names = [c.tag[len(ns):] for c in el if isinstance(c.tag, str) and c.tag.startswith(ns)]
                        positions = [order.index(n) if n in order else -1 for n in names]
                        assert -1 not in positions and positions == sorted(positions), (path.name, part, tag, names)
