"""A user's workspace on disk: task folders and creating a task in one (`folders`, `tasks`), memory
(`memory`), shortcuts (`shortcuts`), skills (`skills`) and the task constitution's naming rule
(`constitution`).

Imported by the services, the tools and the channels; it imports the platform, db and `safe_fs` (every file
in a user's tree is reached through it), never a service nor `tools/`.
"""
