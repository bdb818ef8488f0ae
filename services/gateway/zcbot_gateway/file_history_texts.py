"""What the file-history routes (routes/file_versions.py) say when they refuse, in Chinese and
English (zcbot_gateway.lang picks which). A person reads these in the web page's history dialog
and the run view's undo note, so they say what to do, not only what went wrong."""

from __future__ import annotations

from fastapi import HTTPException

from zcbot_core.runstate.transitions import TaskNotFound

from zcbot_gateway.lang import Catalogue, say

TEXTS: Catalogue = {
    "bad_path": {"zh": "路径无效：请使用根目录下的相对路径（不能为空，不能含“..”、反斜杠或隐藏文件名）。",
                 "en": "Invalid path: {why}."},
    "no_version": {"zh": "这个文件没有这个版本。", "en": "No such version of this file."},
    "version_pruned": {"zh": "这个版本已不再保留（保留策略已将它删除）。",
                       "en": "This version is no longer kept (the retention policy removed it)."},
    "restore_refused": {"zh": "无法把这个版本恢复到 {path}：那里现在不能写入（例如已是一个文件夹）。",
                        "en": "Cannot restore this version to {path}: {why}."},
    "no_task": {"zh": "任务不存在。", "en": "Task not found."},
    "no_run": {"zh": "没有这次运行。", "en": "No such run."},
    "run_active": {"zh": "这个任务正在{status}；请等它结束或先取消，再撤销文件改动。",
                   "en": "The task has an active run ({status}); wait for it to end or cancel it first."},
    "no_changes": {"zh": "这次运行没有改动文件（或者没有这次运行）。",
                   "en": "This run changed no files (or there is no such run)."},
    "revert_refused": {"zh": "还原 {path} 失败；在它之前已还原的文件保持还原状态。",
                       "en": "{why}; files reverted before this one stay reverted."},
}
# How the Chinese sentence names an active run's status (the English one quotes the status itself).
ACTIVE_ZH = {"waiting": "等待运行", "queued": "排队", "running": "运行", "cancelling": "取消运行"}


def refusal(http_status: int, key: str, lang: str, /, **values: object) -> HTTPException:
    return HTTPException(http_status, detail=say(TEXTS, key, lang, **values))


class TaskNotFoundSaid(TaskNotFound):
    """TaskNotFound (same code and status) whose message is the request's language."""

    public_detail = None


def task_not_found(lang: str) -> TaskNotFoundSaid:
    return TaskNotFoundSaid(say(TEXTS, "no_task", lang))


def run_active(status: str, lang: str) -> HTTPException:
    shown = ACTIVE_ZH.get(status, status) if lang != "en" else status
    return refusal(409, "run_active", lang, status=shown)
