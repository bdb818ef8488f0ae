"""The files API's refusals of a delete, rename or mkdir, each with its own `code` (issue 37): the
page says them in the user's language from its dictionary (`errcode.<code>`, zh/en), and the
English `detail` keeps the specifics (which name, which task folder) for API clients and logs."""

from __future__ import annotations

from zcbot_core.errors import ZcbotError


class RootRefused(ZcbotError):
    """The user's root folder itself cannot be deleted or renamed."""

    code, http_status = "root_refused", 400


class SameName(ZcbotError):
    code, http_status = "same_name", 400


class FolderNotEmpty(ZcbotError):
    code, http_status = "folder_not_empty", 400


class FolderInUse(ZcbotError):
    """The folder is, or contains, a live task's folder."""

    code, http_status = "folder_in_use", 409


class FolderBusy(ZcbotError):
    """A task in the folder has an active run: its folder cannot move now."""

    code, http_status = "folder_busy", 409


class NameTaken(ZcbotError):
    code, http_status = "name_taken", 409


class PathChanged(ZcbotError):
    """The tree changed between the checks and the change (the agent's sandbox writes too): retry."""

    code, http_status = "path_changed", 409


class WouldNest(ZcbotError):
    """A folder rename would put one task's folder inside another's (the same rule as task creation)."""

    code, http_status = "nested_folder", 409
