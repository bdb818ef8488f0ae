"""The conversation export's layout (issue 38), on the conversation fixture and small inputs,
read back from the .docx: tool results as tables or lists (not raw JSON), the user's turns set
apart from the assistant's, Chinese emphasis without a synthetic italic, inline code shaded."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from docx import Document
from docx.shared import RGBColor

from zcbot_core.rendering.mdparse import ListBlock, Quote, Table
from zcbot_gateway.export_doc import LABELS, USER_BAR, USER_COLOR, USER_FILL, build_docx, tool_result_blocks

FIXTURE = Path(__file__).resolve().parents[1] / "skills" / "fixtures" / "documents" / "conversation.json"
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
ZH = LABELS["zh"]


def _fixture_docx() -> Document:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for msg in data["messages"]:
        msg["created_at"] = datetime.fromisoformat(msg["created_at"])
    return Document(io.BytesIO(build_docx(data["task"], data["messages"], 0, "zh", ZoneInfo("Asia/Shanghai"))))


def test_tool_results_read_as_tables_and_lists():
    records = json.dumps([{"title": "中试线投产", "url": "https://example.org/a"},
                          {"title": "标准征求意见", "url": "https://example.org/b"}], ensure_ascii=True)
    blocks = tool_result_blocks("web_search", records, ZH)
    assert isinstance(blocks[0], Quote) and "2 条记录" in blocks[0].text
    assert isinstance(blocks[1], Table) and blocks[1].header == ["title", "url"]
    assert blocks[1].rows == [["中试线投产", "https://example.org/a"], ["标准征求意见", "https://example.org/b"]]

    blocks = tool_result_blocks("read", json.dumps({"path": "a.md", "size": 120}), ZH)
    assert isinstance(blocks[1], ListBlock) and [i.text for i in blocks[1].items] == ["path：a.md", "size：120"]

    many = json.dumps([f"第 {i} 行" for i in range(12)], ensure_ascii=False)
    blocks = tool_result_blocks("ls", many, ZH)
    assert len(blocks[1].items) == 8 and "另有 4 条" in blocks[2].text

    one = tool_result_blocks("web_search", json.dumps([{"title": "中试线", "url": "https://e.org"}]), ZH)
    assert len(one) == 1 and "title：中试线 · url：https://e.org" in one[0].text  # one record: one line
    plain = tool_result_blocks("run", "exit 0\nall good", ZH)
    assert len(plain) == 1 and isinstance(plain[0], Quote) and "exit 0 all good" in plain[0].text


def test_fixture_export_has_no_raw_json():
    doc = _fixture_docx()
    full = "\n".join(p.text for p in doc.paragraphs)
    assert '[{"' not in full and '"title":' not in full
    assert "title：某头部企业硫化物中试线投产 · url：https://example.org/a" in full


def test_user_turns_are_set_apart():
    doc = _fixture_docx()
    heads = [p for p in doc.paragraphs if p.style.name == "Heading 1"]
    user = next(p for p in heads if p.text.startswith("用户 · "))
    assistant = next(p for p in heads if p.text.startswith("助手 · "))
    amber = RGBColor.from_string(USER_COLOR)
    assert all(r.font.color.rgb == amber for r in user.runs if r.text)
    assert not any(r.font.color.rgb == amber for r in assistant.runs)

    def marked(para) -> bool:
        ppr = para._p.pPr
        bar = ppr.find(f"{W}pBdr/{W}left") if ppr is not None else None
        shd = ppr.find(f"{W}shd") if ppr is not None else None
        return bar is not None and bar.get(f"{W}color") == USER_BAR and shd is not None and shd.get(f"{W}fill") == USER_FILL

    ask = next(p for p in doc.paragraphs if p.text.startswith("帮我查一下"))
    answer = next(p for p in doc.paragraphs if p.text.startswith("硫化物路线进展"))
    assert marked(user) and marked(ask)
    assert not marked(assistant) and not marked(answer)


def test_fixture_emphasis_and_inline_code():
    doc = _fixture_docx()
    runs = [r for p in doc.paragraphs for r in p.runs]
    assert not any(r.italic and any("\u4e00" <= ch <= "\u9fff" for ch in r.text) for r in runs)
    assert any(r.bold and r.text == "尤其是首批良率" for r in runs)  # *尤其是首批良率*: the CJK fonts' bold
    code = next(r for r in runs if r.text == "ssb.csv")
    assert code._r.rPr.find(f"{W}shd") is not None
