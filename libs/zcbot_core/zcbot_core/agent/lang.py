"""The user's language for the text the agent loop writes itself (seed 003 §3.1: a stop tells the
user to reply 继续 — in their language). Chinese by default (the product's users); English when the
user's latest message is written in English (Latin letters and no CJK character).

One catalogue for every stop and backstop message, so a new one cannot be added in one language only.
"""

from __future__ import annotations

import re
from typing import Any, Literal

Lang = Literal["zh", "en"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_LATIN = re.compile(r"[A-Za-z]")

CONTINUE_WORD: dict[Lang, str] = {"zh": "继续", "en": "continue"}

_TEXTS: dict[str, dict[Lang, str]] = {
    "continue_hint": {"zh": "回复“继续”即可接着做。", "en": 'Reply "continue" to resume.'},
    "repeat_stop": {
        "zh": "已停止：`{name}` 以相同参数调用了 {count} 次，没有新的结果。",
        "en": "stopped: `{name}` was called {count} times with the same arguments without new results.",
    },
    "repeat_note": {
        "zh": "[提示：这个 `{name}` 调用已经 {count} 次返回相同结果；请换一种做法，不要重复]",
        "en": "[note: this exact `{name}` call has now returned the same result {count} times; "
              "change approach instead of repeating it]",
    },
    "stall_stop": {
        "zh": "已停止：连续 {steps} 步没有进展（没有新结果，也没有文件改动）。",
        "en": "stopped: {steps} steps in a row made no progress (no new results or file changes).",
    },
    # Stored after a cancelled run's partial answer (kind "cancelled"), so a reload shows what happened.
    "cancelled_notice": {"zh": "（已取消）", "en": "(cancelled)"},
    "interrupted_notice": {"zh": "（已中止）", "en": "(stopped)"},
    "max_steps_stop": {
        "zh": "已停止：达到 {steps} 步的安全上限。",
        "en": "stopped: reached the safety limit of {steps} steps.",
    },
    "truncated_stop": {
        "zh": "已停止：连续 {count} 次回复在工具调用参数中达到输出上限（{limit} tokens）。",
        "en": "stopped: {count} replies in a row hit the output limit ({limit} tokens) inside tool-call arguments.",
    },
    "call_truncated_warn": {
        "zh": "模型的工具调用在输出上限（{limit} tokens）处被截断：没有执行，已请模型拆分后再调用。",
        "en": "the model's tool call was cut off at the output limit ({limit} tokens); it was not run and the model "
              "was asked to split it",
    },
    "answer_truncated_warn": {
        "zh": "回答在模型的输出上限（{limit} tokens）处被截断；回复“继续”可获得后面的内容。",
        "en": "the answer was cut off at the model's output limit ({limit} tokens); ask it to continue for the rest",
    },
    "filtered_warn": {
        "zh": "模型服务商的内容过滤中止了这次回答，内容可能不完整。",
        "en": "the provider's content filter stopped the answer; it may be incomplete",
    },
    "filtered_stop": {
        "zh": "已停止：模型服务商的内容过滤中止了回复，其中的工具调用没有执行。",
        "en": "stopped: the provider's content filter stopped the model's reply; its tool calls were not run",
    },
    "retry_warn": {
        "zh": "模型调用失败（{why}），{wait:.1f} 秒后重试（第 {attempt} 次，共 {attempts} 次）。",
        "en": "the model call failed ({why}); retrying in {wait:.1f} s (attempt {attempt} of {attempts})",
    },
    "fold_no_turn_warn": {
        "zh": "对话已约 {size} tokens（达到该模型可靠上下文的 {percent}%），但没有更早的用户轮次可以总结；继续使用完整上下文。",
        "en": "the conversation is at about {size} tokens ({percent}% of this model's reliable context) "
              "but has no earlier user turn to summarise; continuing with the full window",
    },
    "fold_failed_warn": {
        "zh": "未能总结之前的对话（{detail}）；继续使用完整历史。",
        "en": "could not summarise the earlier conversation ({detail}); continuing with the full history",
    },
    "events_lost_error": {
        "zh": "有 {count} 个运行事件未能保存（消息总线不可用），实时显示的回答可能不完整；对话本身已保存，刷新任务即可查看完整内容。",
        "en": "{count} run events could not be stored (the message bus was unavailable), so the streamed answer may be "
              "incomplete; the conversation itself is saved: reload the task to see all of it.",
    },
    # A database outage mid-run (the runner leaves the run for redelivery: `Warn` code `db_unavailable`),
    # and the end of a run whose deliveries ran out meanwhile (the reaper): the user is told why.
    "db_outage_warn": {
        "zh": "数据库暂时不可用；恢复后运行会从最后保存的一步继续。",
        "en": "the database is unavailable; the run will resume from its last saved step once it is back",
    },
    "db_outage_lost_error": {
        "zh": "数据库暂时不可用，这次运行没能完成（等待期间请求已过期）；请重新发送消息。",
        "en": "the database was unavailable and the run could not finish (its request expired while waiting); "
              "send the message again",
    },
    "run_lost_error": {
        "zh": "这次运行丢失了（执行它的 runner 已停止，请求也不在队列中）；请重新发送消息。",
        "en": "the run was lost (its runner stopped and the request is no longer queued); send the message again",
    },
    # a built-in skill's `model:` (seed 003 §3.5 "切失败降级原模型"): the switch failed, the model stays
    "model_switch_skipped_warn": {
        "zh": "技能建议使用模型 `{profile}`，但无法切换（{detail}）；继续使用当前模型 `{current}`。",
        "en": "the skill prefers model `{profile}` but it cannot be used ({detail}); continuing with `{current}`",
    },
    "model_switch_fallback_warn": {
        "zh": "切换到的模型 `{profile}` 调用失败（{detail}）；已改回原来的模型 `{current}` 继续。",
        "en": "the switched-to model `{profile}` failed ({detail}); switched back to `{current}` to continue",
    },
    "wall_clock_stop": {
        "zh": "已停止：本次运行超过了 {seconds} 秒的总时长上限（进展正常的运行也会在这里暂停）。",
        "en": "stopped: the run exceeded its wall-clock limit of {seconds} s (a backstop; the run was still working).",
    },
}


def detect(text: str) -> Lang:
    """English only when the text has Latin letters and no CJK character; otherwise Chinese."""
    if _CJK.search(text):
        return "zh"
    return "en" if _LATIN.search(text) else "zh"


def user_language(messages: list[dict[str, Any]]) -> Lang:
    """The language of the latest user message with text (a window of LiteLLM messages)."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # multimodal parts: the text ones
            content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
        text = str(content or "").strip()
        if text:
            return detect(text)
    return "zh"


def say(key: str, lang: Lang, **values: object) -> str:
    return _TEXTS[key][lang].format(**values)


def cancel_notice(reason: str, lang: Lang) -> str:
    """What history says after a cancelled run's answer (kind "cancelled"): the user cancelled it, or
    anything else stopped it (an interrupting message, a timeout)."""
    return say("cancelled_notice" if reason == "user" else "interrupted_notice", lang)


def stop_text(key: str, lang: Lang, **values: object) -> str:
    """A stop message followed by how to continue."""
    sep = "" if lang == "zh" else " "
    return say(key, lang, **values) + sep + say("continue_hint", lang)
