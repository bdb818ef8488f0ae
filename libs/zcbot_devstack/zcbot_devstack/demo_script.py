"""What the demo model (`zcbot up --demo`) answers: a fixed little task shown end to end, whatever the
user wrote. Chosen by where the conversation is since the user's last message (how many tool results
followed it), so it is stateless like a real model:

0. streamed text saying it is the demo model, and a `write` of `demo/hello.md`;
1. a `write` of a three-slide outline (`demo/outline.json`);
2. a `shell` call of the ppt skill's deck script on it (`demo/demo.pptx`);
3. a closing text naming the files (or the error a step returned), and how to use a real model.

Chinese unless the user wrote no Chinese character (then English).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

NOTE_ZH = "（这是 zcbot 的演示模型：回复是写好的脚本，不调用任何真实的大模型，也不需要 API key。）"
NOTE_EN = "(This is zcbot's demo model: scripted replies, no real LLM is called and no API key is needed.)"
_CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass
class DemoTurn:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _outline(zh: bool, said: str) -> dict[str, Any]:
    slides: list[dict[str, Any]]
    if zh:
        slides = [
            {"type": "title", "title": "zcbot 演示", "subtitle": "由演示模型生成"},
            {"title": "刚才发生了什么", "bullets": ["模型流式回复文字", "调用工具写入文件",
                                              "ppt 技能把大纲做成幻灯片"]},
            {"type": "closing", "title": "下一步", "subtitle": "设置 DEEPSEEK_API_KEY，去掉 --demo 重启"},
        ]
    else:
        slides = [
            {"type": "title", "title": "zcbot demo", "subtitle": "made by the demo model"},
            {"title": "What just happened", "bullets": ["The model streamed its reply", "A tool call wrote a file",
                                                        "The ppt skill built this deck"]},
            {"type": "closing", "title": "Next", "subtitle": "export DEEPSEEK_API_KEY, restart without --demo"},
        ]
    slides[1]["notes"] = said[:200]
    return {"theme": "minimal", "slides": slides}


def demo_turn(messages: list[dict[str, Any]]) -> DemoTurn:
    """The reply to a chat-completion request's `messages`."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    said = _text(messages[last_user]) if last_user >= 0 else ""
    zh = bool(_CJK.search(said)) or not said.strip()
    results = [_text(m) for m in messages[last_user + 1:] if m.get("role") == "tool"]
    step = len(results)
    skills = os.environ.get("ZCBOT_SANDBOX_SKILLS_DIR", "/sandbox/skills")  # raw: the services' own variable
    if step == 0:
        hello = (f"# 你好\n\n你说：{said}\n\n这个文件是演示模型用 `write` 工具写的。\n" if zh
                 else f"# Hello\n\nYou said: {said}\n\nThe demo model wrote this file with the `write` tool.\n")
        text = (f"{NOTE_ZH}\n\n收到。我先把你的话写进一个文件，再用 ppt 技能做一个三页的小幻灯片。" if zh
                else f"{NOTE_EN}\n\nGot it. First I write your message into a file, then I make a three-slide "
                     "deck with the ppt skill.")
        return DemoTurn(text, [("write", {"path": "demo/hello.md", "content": hello})])
    if step == 1:
        outline = json.dumps(_outline(zh, said), ensure_ascii=False, indent=2)
        return DemoTurn("写好了 demo/hello.md。现在写幻灯片的大纲。" if zh else "Wrote demo/hello.md. Now the outline.",
                        [("write", {"path": "demo/outline.json", "content": outline})])
    if step == 2:
        command = f"python {skills}/ppt/scripts/outline_to_deck.py demo/outline.json demo/demo.pptx"
        return DemoTurn("用 ppt 技能把大纲做成幻灯片。" if zh else "Building the deck with the ppt skill.",
                        [("shell", {"command": command})])
    failed = "wrote demo/demo.pptx" not in results[-1]  # the deck script's first line when it made the deck
    if zh:
        done = ("做幻灯片这一步没有成功（见上面的工具结果）；demo/hello.md 已写好。" if failed else
                "完成：demo/hello.md 和 demo/demo.pptx 已在任务文件夹里，点开即可预览。")
        return DemoTurn(f"{done}\n\n要用真实模型：`export DEEPSEEK_API_KEY=...`，然后不带 --demo 重新运行 `zcbot up`。")
    done = ("Building the deck failed (see the tool result above); demo/hello.md is written." if failed else
            "Done: demo/hello.md and demo/demo.pptx are in the task folder; open them to preview.")
    return DemoTurn(f"{done}\n\nFor a real model: `export DEEPSEEK_API_KEY=...`, then run `zcbot up` without --demo.")
