"""Routers of the files, memory, shortcuts, export, admin (and its clean-up), model-profile and background-process APIs (included by `app.create_app`)."""

from __future__ import annotations

from fastapi import APIRouter

from zcbot_gateway.routes import (
                                  admin,
                                  admin_cleanup,
                                  admin_users,
                                  export,
                                  files,
                                  memory,
                                  models,
                                  previews,
                                  procs,
                                  resend,
                                  shortcuts,
)

ROUTERS: list[APIRouter] = [files.router, memory.router, shortcuts.router, export.router, admin.router,
                         admin_cleanup.router, admin_users.router, procs.router, previews.router, models.router,
                         resend.router]
