"""What the file-history routes (routes/file_versions.py) say when they refuse, and why a revert
skipped a path (each conflict's `reason` beside its stable `code`), in Chinese and English
(zcbot_gateway.lang picks which). A person reads these in the web page's history dialog and the
run view's undo note, so they say what to do, not only what went wrong."""

from __future__ import annotations

from typing import Any

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
    "revert_refused": {"zh": "无法撤销这次运行的文件改动：打不开你的文件夹。",
                       "en": "Cannot undo this run's file changes: {why}."},
}
# A revert conflict's `reason`, by its `code` (zcbot_core.filehistory.revert.CONFLICT_CODES).
CONFLICTS: Catalogue = {
    "file_where_folder_was": {"zh": "这次运行删除的文件夹原来的位置现在是一个文件，未恢复该文件夹。",
                              "en": "A file is where the folder the run removed was; the folder was not made again."},
    "changed_since_run": {"zh": "这个文件在运行之后又被改过，已跳过；要覆盖这些改动请选择“仍然撤销”。",
                          "en": "The file was changed again after the run and was skipped; "
                                "force the undo to overwrite it."},
    "folder_not_empty": {"zh": "这次运行新建的文件夹里还有不是它留下的内容，已保留该文件夹。",
                         "en": "The folder the run made holds content that is not the run's, so it was kept."},
    "folder_where_file_was": {"zh": "这个文件原来的位置现在是一个文件夹，未还原该文件。",
                              "en": "A folder is where this file was; the file was not put back."},
    "parent_not_folder": {"zh": "这个路径上应是文件夹的位置现在是一个文件或链接，未还原；移走它后可以再撤销一次。",
                          "en": "A file or link stands where a folder on this path should be; it was not reverted. "
                                "Move it away and undo again."},
    "not_applied": {"zh": "还原这个路径时出错（例如磁盘已满，或它刚被改动），未还原；其他路径不受影响，可以稍后再撤销一次。",
                    "en": "Reverting this path failed ({why}); the other paths are not affected. Undo again later."},
}
# How the Chinese sentence names an active run's status (the English one quotes the status itself).
ACTIVE_ZH = {"waiting": "等待运行", "queued": "排队", "running": "运行", "cancelling": "取消运行"}


def conflict_reasons(conflicts: list[dict[str, Any]], lang: str) -> list[dict[str, Any]]:
    """Each conflict with its `reason` in the request's language (its `code` is what clients branch on)."""
    return [{**c, "reason": say(CONFLICTS, c["code"], lang, why=c.get("why", ""))} for c in conflicts]


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
