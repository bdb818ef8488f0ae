"""A model-driven run that uses the ppt skill end to end (issues 5, 6): load_skill -> write the
outline -> run the skill's script in the sandbox -> a downloadable .pptx in the task folder."""

from __future__ import annotations

import io
import json

from pptx import Presentation

from tests.helpers.stack import Stack

OUTLINE = {
    "title": "Bench deck",
    "slides": [
        {"type": "title", "title": "Quarterly review", "subtitle": "zcbot", "notes": "Open warmly."},
        {"title": "Highlights", "bullets": ["Revenue up 18%", "Churn below 3%"], "notes": "Stress growth."},
        {"title": "Revenue", "chart": {"type": "column", "categories": ["Q1", "Q2"],
                                       "series": [{"name": "2026", "values": [1, 2]}]}},
    ],
}


async def test_model_builds_a_deck_with_the_ppt_skill(stack: Stack) -> None:
    stack.fake.script("KEY-deck", [
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "ppt"}}]},
        {"tool_calls": [{"name": "write", "arguments": {"path": "outline.json", "content": json.dumps(OUTLINE)}}]},
        {"tool_calls": [{"name": "shell", "arguments": {
            "command": "python /sandbox/skills/ppt/scripts/outline_to_deck.py outline.json deck.pptx"}}]},
        {"text": "deck.pptx is ready."},
    ])
    token = await stack.login("pat")
    task = await stack.create_task(token, "Deck")
    r = await stack.post(token, task["task_id"], "KEY-deck make me a deck")
    events = await stack.events(token, r.json()["events_url"], timeout=90)
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert [t["name"] for t in results] == ["load_skill", "write", "shell"]
    assert all(t["ok"] for t in results), results
    assert events[-1]["data"]["status"] == "ok"
    # The system prompt advertised the skill (discovery layer) and load_skill returned its body.
    first_request = next(req for req in stack.fake.requests if "KEY-deck" in json.dumps(req["messages"]))
    assert "ppt" in first_request["messages"][0]["content"]
    async with stack.client(token) as c:
        listing = (await c.get("/v1/files", params={"path": task["working_dir"]})).json()
        assert "deck.pptx" in [e["name"] for e in listing["items"]]
        download = await c.get("/v1/files/download", params={"path": f"{task['working_dir']}/deck.pptx"})
    assert download.status_code == 200
    deck = Presentation(io.BytesIO(download.content))
    assert len(deck.slides) == 3
    assert deck.slides[0].shapes.title.text == "Quarterly review"
    assert any(shape.has_chart for shape in deck.slides[2].shapes)
    assert deck.slides[1].notes_slide.notes_text_frame.text == "Stress growth."
