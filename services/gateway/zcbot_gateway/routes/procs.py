"""Background processes (seed 003 §8.12): the web's job cards.

- `GET /v1/procs?task_id=` -> the list envelope of your background processes, newest first; each
  `{proc_id, task_id, kind, command, state (running | exited | killed | timed_out | lost | shutdown),
  started_at, ended_at (unix seconds or null), elapsed_seconds, exit_code, keep (null: unknown)}`.
- `POST /v1/procs/{proc_id}/kill` -> that process after the kill; not yours or unknown: 404.

The gateway does not read the process folders itself: it asks any executor over the bus
(`ProcsRequest` on `exec_procs_subject`, with a grant for the user that only the gateway can sign),
which reads only that user's folder and kills from outside the process tree (zcbot_executor/background/web.py).
No executor answering is a prompt 503 with Retry-After, in the request's language (issue 34): none
subscribed (still starting) is known at once; one subscribed but silent is given `LIST_TIMEOUT`
for a list (a list is a few hundred small reads), `ASK_TIMEOUT` for a kill (which waits for the
wrapper to exit). The page keeps the cards it has and asks again on its next refresh.
"""

from __future__ import annotations

from typing import Annotated, Any

import nats.errors
from fastapi import APIRouter, Path, Query

from zcbot_core.bus import ProcsReply, ProcsRequest, decode, encode, grants
from zcbot_core.bus.messages import PROCS_GRANT_RUN
from zcbot_gateway.deps import CurrentUser, RuntimeDep, SettingsDep
from zcbot_gateway.errors import ServiceUnavailable
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep, bad_request, not_found
from zcbot_gateway.lang import Catalogue, LangDep, say

router = APIRouter(prefix="/v1/procs", tags=["procs"])
ProcPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)
ASK_TIMEOUT = 10.0  # a kill waits up to 3 s for the wrapper to exit
LIST_TIMEOUT = 3.0
ProcId = Annotated[str, Path(max_length=40, pattern=r"^[A-Za-z0-9]+$")]
TEXTS: Catalogue = {
    "no_executor": {"zh": "执行服务暂时没有响应（可能正在启动），暂时无法列出或停止后台任务；请几秒后再试。",
                    "en": "The executor is not answering yet (it may be starting); background processes cannot be "
                          "listed or stopped right now. Try again in a few seconds."},
}


async def _ask(rt: Any, settings: Any, req: ProcsRequest, lang: str, timeout: float = ASK_TIMEOUT) -> ProcsReply:
    req.grant = grants.issue(settings.zcbot_run_grant_key, PROCS_GRANT_RUN, req.user_id, "")
    try:
        msg = await rt.nc.request(rt.topo.exec_procs_subject(), encode(req), timeout=timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        raise ServiceUnavailable(say(TEXTS, "no_executor", lang)) from None  # 503 with Retry-After
    reply = decode(msg.data, ProcsReply)
    if not reply.ok and reply.error == "not_found":
        raise not_found("no such background process")
    if not reply.ok and reply.error.startswith("bad_request"):
        raise bad_request(reply.error.partition(": ")[2] or reply.error)
    if not reply.ok:  # refused: this gateway's grant key does not match the executors'
        raise ServiceUnavailable("the executor refused the request (grant key mismatch)")
    return reply


@router.get("")
async def list_procs(user: CurrentUser, rt: RuntimeDep, settings: SettingsDep, paging: ProcPaging, lang: LangDep,
                     task_id: Annotated[str | None, Query(max_length=32, pattern=r"^[A-Za-z0-9_-]+$")] = None,
                     ) -> dict[str, Any]:
    """Your background processes (list envelope), optionally of one task."""
    reply = await _ask(rt, settings, ProcsRequest(user_id=user, action="list", task_id=task_id or ""), lang,
                       timeout=LIST_TIMEOUT)
    return paging.slice(reply.procs)


@router.post("/{proc_id}/kill")
async def kill_proc(proc_id: ProcId, user: CurrentUser, rt: RuntimeDep, settings: SettingsDep,
                    lang: LangDep) -> dict[str, Any]:
    """Stop one of your background processes; answers its state afterwards."""
    reply = await _ask(rt, settings, ProcsRequest(user_id=user, action="kill", proc_id=proc_id), lang)
    return reply.procs[0] if reply.procs else {"proc_id": proc_id, "state": "killed"}
