"""One iLink `getupdates` long-poll loop per binding, run by whichever replica holds its lease.

Each turn reloads the binding (a re-login's new token, a pause set elsewhere, or an unbinding
take effect at once), then long-polls with the persisted cursor. Messages are claimed in the
database first (dedupe on message_id for 24 h, and the sender's context_token is sealed into
the binding in the same locked update), then handed to a conversation task; only then is the
new cursor saved, so a crash re-fetches rather than loses messages and the re-fetch is
deduplicated.

errcode -14 (session expired): the loop records `session=expired` and `paused_until` in the
binding (so another replica taking over honours the pause), sleeps out the pause (default 1 h,
as the official client), then calls `msg/notifystart` and polls again; the first successful
poll marks the session `ok`. Outbound sends are not blocked by the pause.

Conversations belong to the lease holder: a reply in progress is recorded in the binding
(`pending_replies[run_id] = {task_id, started, to, text_sent}`) and removed once sent. When the
loop stops (drain, lost lease) its conversations are cancelled, and the next holder resumes
each pending reply (waits for the run if it is still going, then sends what is left), so a
rolling restart of the channels service loses no answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

import httpx

from zcbot_channels.context import ChannelsContext
from zcbot_channels.leases import Lease
from zcbot_core import safe_fs
from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import MEDIA_ONLY_REPLY, ReplyHooks, resume_reply, run_message
from zcbot_core.channels.ilink_api import MSG_USER, ILinkClient, ILinkError, SessionExpired, has_media, message_text
from zcbot_core.platform.worker import TaskGroup, wait_or_stop

log = logging.getLogger(__name__)

RETRY_DELAY_SECONDS = 2.0
BACKOFF_SECONDS = 30.0
MAX_CONSECUTIVE_FAILURES = 3
RECENT_IDS = 2048
POLL_TIMEOUT_CAP_SECONDS = 120.0


def message_key(msg: dict[str, Any]) -> str | None:
    for name in ("message_id", "client_id", "seq"):
        value = msg.get(name)
        if value not in (None, "", 0):
            return f"{name}:{value}"
    return None


class ILinkReplier:
    """Sends to one WeChat user through a binding, always with the binding's latest context_token."""

    def __init__(self, ctx: ChannelsContext, binding_id: int, to_user_id: str) -> None:
        self.ctx = ctx
        self.binding_id = binding_id
        self.to = to_user_id

    async def _creds(self) -> tuple[str, str | None, str | None]:
        binding = await bindings.get_binding(self.ctx.sessions, self.binding_id)
        if binding is None:
            raise ILinkError("the WeChat binding was removed")
        cfg = binding.config or {}
        token = bindings.get_secret(self.ctx.key, cfg, "bot_token")
        if not token:
            raise ILinkError("the WeChat binding has no bot token; log in again")
        return token, bindings.get_secret(self.ctx.key, cfg, "context_token"), cfg.get("baseurl")

    async def send_text(self, text: str) -> None:
        token, context_token, base = await self._creds()
        await self.ctx.ilink.send_text(self.to, text, token=token, context_token=context_token, base_url=base)

    async def send_file(self, path: safe_fs.UserFile) -> None:
        token, context_token, base = await self._creds()
        await self.ctx.ilink.send_file(self.to, path, token=token, context_token=context_token, base_url=base)


class ILinkPoller:
    def __init__(self, ctx: ChannelsContext, binding_id: int, lease: Lease) -> None:
        self.ctx = ctx
        self.binding_id = binding_id
        self.lease = lease
        self.stopping = asyncio.Event()
        self._recent: OrderedDict[str, None] = OrderedDict()
        self.polls = 0
        self.poll_timeout = ctx.cs.ilink_poll_timeout
        self.conversations = TaskGroup()
        self.failures = 0
        # The long poll has its own connection, closed before the lease is released: the server
        # never sees this replica's poll still open while the next holder's starts.
        self.poll_client = ILinkClient(ctx.cs, httpx.AsyncClient(timeout=httpx.Timeout(15.0, connect=10.0)))

    def __repr__(self) -> str:
        return f"ILinkPoller(binding_id={self.binding_id})"

    async def _sleep(self, seconds: float) -> None:
        await wait_or_stop(self.stopping, seconds)

    async def run(self) -> None:
        keeper = asyncio.create_task(self.lease.keep())
        loop_task = asyncio.create_task(self._loop())
        lost = asyncio.create_task(self.lease.lost.wait())
        try:
            await asyncio.wait({loop_task, lost}, return_when=asyncio.FIRST_COMPLETED)
            if self.lease.held() and not self.stopping.is_set():
                # The loop ended on its own (unbound / inactive): let running conversations finish.
                await self.conversations.wait(self.ctx.conversation_deps.timeout)
        finally:
            # Conversations belong to the lease holder: their pending replies (persisted in the
            # binding) are resumed by the next holder.
            tasks = [loop_task, lost, keeper, *self.conversations.tasks()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.poll_client.http.aclose()
            await self.lease.release()
            log.info("ilink loop stopped", extra={"binding_id": self.binding_id})

    async def _update(self, fn: Any) -> dict[str, Any] | None:
        return await bindings.update_config(self.ctx.sessions, self.binding_id, fn)

    async def _loop(self) -> None:
        log.info("ilink loop started", extra={"binding_id": self.binding_id})
        self.failures = 0
        try:
            await self._resume_pending()
        except Exception:
            log.exception("ilink pending replies could not be resumed", extra={"binding_id": self.binding_id})
        while not self.stopping.is_set():
            try:
                if not await self._turn():
                    return
            except Exception:  # a database or bus hiccup must not end the loop
                log.exception("ilink loop turn failed", extra={"binding_id": self.binding_id})
                await self._sleep(RETRY_DELAY_SECONDS)

    async def _turn(self) -> bool:
        """One long poll and its messages; False when the loop must stop."""
        binding = await bindings.get_binding(self.ctx.sessions, self.binding_id)
        if binding is None or not bindings.usable(binding):
            log.info("ilink binding gone or inactive; stopping its loop", extra={"binding_id": self.binding_id})
            return False
        cfg = binding.config or {}
        token = bindings.get_secret(self.ctx.key, cfg, "bot_token")
        if not token:
            return False
        base = cfg.get("baseurl")
        paused_until = float(cfg.get("paused_until") or 0)
        if paused_until > time.time():
            await self._sleep(min(paused_until - time.time(), 5.0))
            return True
        if cfg.get("session") == "expired":
            try:
                await self.poll_client.notifystart(token=token, base_url=base)
                log.info("ilink notifystart after session pause", extra={"binding_id": self.binding_id})
            except ILinkError as exc:
                log.warning("ilink notifystart failed", extra={"binding_id": self.binding_id, "error": str(exc)})
        if not self.lease.held():
            return False
        self.polls += 1
        try:
            resp = await self.poll_client.getupdates(str(cfg.get("cursor") or ""), token=token, base_url=base,
                                                   timeout=self.poll_timeout)
        except SessionExpired:
            pause = self.ctx.cs.ilink_session_pause
            log.warning("ilink session expired; pausing the long poll",
                        extra={"binding_id": self.binding_id, "pause_seconds": pause})

            def expire(c: dict[str, Any]) -> dict[str, Any]:
                c["session"] = "expired"
                c["paused_until"] = time.time() + pause
                return c

            await self._update(expire)
            self.failures = 0
            return True
        except ILinkError as exc:
            self.failures += 1
            log.warning("ilink getupdates failed", extra={"binding_id": self.binding_id, "error": str(exc),
                                                         "failures": self.failures})
            if self.failures >= MAX_CONSECUTIVE_FAILURES:
                self.failures = 0
                await self._sleep(BACKOFF_SECONDS)
            else:
                await self._sleep(RETRY_DELAY_SECONDS)
            return True
        self.failures = 0
        suggested = resp.get("longpolling_timeout_ms")
        if isinstance(suggested, (int, float)) and suggested > 0:  # the server's hold + a margin
            self.poll_timeout = min(suggested / 1000.0 + 3.0, POLL_TIMEOUT_CAP_SECONDS)
        if not self.lease.held():
            return False  # the new holder re-fetches from the persisted cursor
        all_handled = True
        for msg in resp.get("msgs") or []:
            try:
                await self._inbound(binding, msg)
            except Exception:
                all_handled = False  # keep the old cursor: the next poll re-fetches (claimed ones are deduped)
                log.exception("ilink inbound message failed", extra={"binding_id": self.binding_id})
        new_cursor = resp.get("get_updates_buf") if all_handled else None
        recovered = cfg.get("session") == "expired" or "paused_until" in cfg

        def advance(c: dict[str, Any]) -> dict[str, Any]:
            if new_cursor:
                c["cursor"] = new_cursor
            if recovered:
                c["session"] = "ok"
                c.pop("paused_until", None)
            return c

        if (new_cursor and new_cursor != cfg.get("cursor")) or recovered:
            await self._update(advance)
            if recovered:
                log.info("ilink session recovered", extra={"binding_id": self.binding_id})
        if not all_handled:
            await self._sleep(RETRY_DELAY_SECONDS)
        return True

    def _seen_recently(self, key: str) -> bool:
        if key in self._recent:
            return True
        self._recent[key] = None
        while len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)
        return False

    async def _inbound(self, binding: Any, msg: dict[str, Any]) -> None:
        if msg.get("message_type") not in (None, MSG_USER):
            return  # the bot's own messages
        sender = str(msg.get("from_user_id") or "")
        owner = (binding.config or {}).get("ilink_user_id")
        if not sender or (owner and sender != owner):
            log.info("ilink message from someone other than the bound user ignored",
                     extra={"binding_id": self.binding_id})
            return
        key = message_key(msg)
        if key is None or self._seen_recently(key):
            return
        context_token = msg.get("context_token")
        key_bytes = self.ctx.key

        def remember(c: dict[str, Any]) -> dict[str, Any]:
            if context_token:
                c = bindings.with_secret(key_bytes, c, "context_token", str(context_token))
                c["context_token_at"] = time.time()
            c["peer"] = sender
            return c

        if not await bindings.claim_inbound(self.ctx.sessions, self.binding_id, f"ilink:{key}", extra=remember):
            log.info("ilink duplicate dropped", extra={"binding_id": self.binding_id, "msg_key": key})
            return
        text = message_text(msg).strip()
        replier = ILinkReplier(self.ctx, self.binding_id, sender)
        if not text:
            if has_media(msg):
                self.ctx.spawn(replier.send_text(MEDIA_ONLY_REPLY))
            return
        self._own(self._converse(binding.user_id, text, replier))

    def _own(self, coro: Any) -> None:
        self.conversations.spawn(coro)

    def _hooks(self, to_user_id: str) -> ReplyHooks:
        """Persist the reply in progress under `pending_replies` so a new lease holder can finish it."""

        async def submitted(task_id: str, run_id: str, started: float) -> None:
            def add(c: dict[str, Any]) -> dict[str, Any]:
                pending = dict(c.get("pending_replies") or {})
                pending[run_id] = {"task_id": task_id, "started": started, "to": to_user_id, "text_sent": False}
                c["pending_replies"] = pending
                return c

            await self._update(add)

        async def text_sent(run_id: str) -> None:
            def mark(c: dict[str, Any]) -> dict[str, Any] | None:
                pending = dict(c.get("pending_replies") or {})
                if run_id not in pending:
                    return None
                pending[run_id] = {**pending[run_id], "text_sent": True}
                c["pending_replies"] = pending
                return c

            await self._update(mark)

        async def finished(run_id: str) -> None:
            def drop(c: dict[str, Any]) -> dict[str, Any] | None:
                pending = dict(c.get("pending_replies") or {})
                if pending.pop(run_id, None) is None:
                    return None
                c["pending_replies"] = pending
                return c

            await self._update(drop)

        return ReplyHooks(submitted=submitted, text_sent=text_sent, finished=finished)

    async def _resume_pending(self) -> None:
        binding = await bindings.get_binding(self.ctx.sessions, self.binding_id)
        if binding is None:
            return
        for run_id, item in dict((binding.config or {}).get("pending_replies") or {}).items():
            replier = ILinkReplier(self.ctx, self.binding_id, str(item.get("to") or ""))
            log.info("ilink resuming a pending reply", extra={"binding_id": self.binding_id, "run_id": run_id})
            self._own(self._resume(binding.user_id, run_id, item, replier))

    async def _resume(self, user_id: str, run_id: str, item: dict[str, Any], replier: ILinkReplier) -> None:
        try:
            await resume_reply(self.ctx.conversation_deps, user_id, bindings.ILINK, str(item["task_id"]), run_id,
                               float(item.get("started") or 0), replier, self._hooks(replier.to),
                               text_sent=bool(item.get("text_sent")))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ilink pending reply failed", extra={"binding_id": self.binding_id, "run_id": run_id})
            await self._hooks(replier.to).finished(run_id)  # type: ignore[misc]

    async def _converse(self, user_id: str, text: str, replier: ILinkReplier) -> None:
        try:
            outcome = await run_message(self.ctx.conversation_deps, user_id, bindings.ILINK, text, replier,
                                        hooks=self._hooks(replier.to))
            log.info("ilink message handled", extra={"binding_id": self.binding_id, "status": outcome.status,
                                                     "run_id": outcome.run_id})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("ilink conversation failed", extra={"binding_id": self.binding_id,
                                                              "error": exc.__class__.__name__})
            try:
                await replier.send_text("Sorry, something went wrong while handling your message; please try again.")
            except Exception:
                pass

