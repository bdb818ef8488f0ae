"""The document writer's Word-native features (issue 24): numbered and bulleted lists defined in
numbering.xml, superscript citations, metadata from the frontmatter, real footnotes."""

from __future__ import annotations

import zipfile

from docx import Document

from zcbot_core.rendering import markdown_to_docx

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"

MD = """---
title: 固态电解质研究
author: 张三
subject: 面上项目
keywords: 固态电池; 界面
---

## 背景

界面副反应严重[1]，已有工作[2,3]与综述[4-6]。见脚注[^a]。

- 要点一
- 要点二
  1. 子项一
  2. 子项二

1. 第一步
2. 第二步

另一段。

1. 新列表第一项
2. 新列表第二项

[^a]: 脚注正文，含 LiNbO3。
"""


def _render(tmp_path, md: str = MD, profile: str = "proposal"):
    out = tmp_path / "d.docx"
    report = markdown_to_docx(md, out, profile=profile)
    return out, report, Document(str(out))


def _num(para) -> tuple[int, int] | None:
    num_pr = para._p.find(f"{W}pPr/{W}numPr")
    if num_pr is None:
        return None
    return int(num_pr.find(f"{W}numId").get(f"{W}val")), int(num_pr.find(f"{W}ilvl").get(f"{W}val"))


def test_lists_are_word_numbering_not_typed_markers(tmp_path):
    _, report, doc = _render(tmp_path)
    assert not report.problems
    items = [p for p in doc.paragraphs if _num(p)]
    assert [p.text for p in items] == ["要点一", "要点二", "子项一", "子项二", "第一步", "第二步", "新列表第一项", "新列表第二项"]
    assert not any(p.text.startswith(("•", "1.", "◦")) for p in doc.paragraphs)
    nums = [_num(p) for p in items]
    assert nums[0] == nums[1] and nums[0][1] == 0          # bullets share one definition
    assert nums[2][1] == 1 and nums[2][0] == nums[3][0]     # nested ordered items: level 1, one list
    assert nums[4][0] == nums[5][0] != nums[6][0] == nums[7][0]  # each ordered list restarts
    numbering = doc.part.numbering_part.element
    formats = {}
    for num in numbering.findall(f"{W}num"):
        abstract = num.find(f"{W}abstractNumId").get(f"{W}val")
        formats[int(num.get(f"{W}numId"))] = (abstract, num.find(f"{W}lvlOverride") is not None)
    by_abstract = {a.get(f"{W}abstractNumId"): a for a in numbering.findall(f"{W}abstractNum")}

    def fmt(num_id: int, level: int) -> str:
        lvl = by_abstract[formats[num_id][0]].findall(f"{W}lvl")[level]
        return lvl.find(f"{W}numFmt").get(f"{W}val")

    assert fmt(nums[0][0], 0) == "bullet" and fmt(nums[4][0], 0) == "decimal"
    assert formats[nums[6][0]][1]  # a start override: the second list counts from 1 again
    # Schema order: all abstractNum elements before the first num.
    tags = [child.tag for child in numbering]
    assert max(i for i, t in enumerate(tags) if t == f"{W}abstractNum") < tags.index(f"{W}num")


def test_citations_are_superscript(tmp_path):
    _, _, doc = _render(tmp_path)
    body = next(p for p in doc.paragraphs if "界面副反应" in p.text)
    sup = [r.text.replace("\u2060", "") for r in body.runs if r.font.superscript and r.text]
    assert sup == ["[1]", "[2,3]", "[4-6]"]
    en = "---\nlang: en\n---\n\nLatency fell [1] and rose [2-3].\n"
    _, _, doc = _render(tmp_path, en, "brief")
    para = next(p for p in doc.paragraphs if "Latency" in p.text)
    assert "fell\u2060[1]" in para.text  # the space before a superscript mark is dropped
    # No line break inside a range either: a word joiner after its hyphen ("[4-" / "6]" was seen).
    assert [r.text for r in para.runs if r.font.superscript] == ["\u2060[1]", "\u2060[2-\u20603]"]


def test_metadata_comes_from_the_frontmatter(tmp_path):
    _, _, doc = _render(tmp_path)
    props = doc.core_properties
    assert (props.title, props.author, props.subject, props.keywords, props.language) == (
        "固态电解质研究", "张三", "面上项目", "固态电池; 界面", "zh-CN")
    assert props.last_modified_by == "张三"
    _, _, doc = _render(tmp_path, "# Only a heading\n\nText in English here.\n", "paper")
    props = doc.core_properties
    assert props.author != "python-docx" and props.author == ""
    assert props.title == "Only a heading" and props.language == "en-US"


def test_footnotes_are_real_word_footnotes(tmp_path):
    out, report, doc = _render(tmp_path)
    body = next(p for p in doc.paragraphs if "见脚注" in p.text)
    assert "[^a]" not in body.text
    assert body._p.find(f".//{W}footnoteReference") is not None
    with zipfile.ZipFile(out) as zf:
        notes = zf.read("word/footnotes.xml").decode()
        types = zf.read("[Content_Types].xml").decode()
        rels = zf.read("word/_rels/document.xml.rels").decode()
    assert "脚注正文" in notes and "footnotes+xml" in types and "relationships/footnotes" in rels
    assert '<w:vertAlign w:val="subscript"/>' in notes  # the note's own text goes through the formula rule


def test_undefined_and_unused_footnotes_are_reported(tmp_path):
    md = "正文[^x]。\n\n[^y]: 没有被引用。\n"
    _, report, doc = _render(tmp_path, md)
    assert any("[^x]" in p and "not defined" in p for p in report.problems)
    assert any("[^y]" in p and "never referenced" in p for p in report.problems)
    assert "[^x]" in doc.paragraphs[0].text  # left as written, not silently dropped
