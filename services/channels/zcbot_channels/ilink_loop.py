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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import MEDIA_ONLY_REPLY, run_message
from zcbot_core.channels.ilink_api import MSG_USER, ILinkError, SessionExpired, has_media, message_text

from zcbot_channels.leases import Lease

if TYPE_CHECKING:
    from zcbot_channels.service import ChannelsService

log = logging.getLogger(__name__)

RETRY_DELAY_SECONDS = 2.0
BACKOFF_SECONDS = 30.0
MAX_CONSECUTIVE_FAILURES = 3
RECENT_IDS = 2048


def message_key(msg: dict[str, Any]) -> str | None:
    for name in ("message_id", "client_id", "seq"):
        value = msg.get(name)
        if value not in (None, "", 0):
            return f"{name}:{value}"
    return None


class ILinkReplier:
    """Sends to one WeChat user through a binding, always with the binding's latest context_token."""

    def __init__(self, svc: "ChannelsService", binding_id: int, to_user_id: str) -> None:
        self.svc = svc
        self.binding_id = binding_id
        self.to = to_user_id

    async def _creds(self) -> tuple[str, str | None, str | None]:
        binding = await bindings.get_binding(self.svc.sessions, self.binding_id)
        if binding is None:
            raise ILinkError("the WeChat binding was removed")
        cfg = binding.config or {}
        token = bindings.get_secret(self.svc.key, cfg, "bot_token")
        if not token:
            raise ILinkError("the WeChat binding has no bot token; log in again")
        return token, bindings.get_secret(self.svc.key, cfg, "context_token"), cfg.get("baseurl")

    async def send_text(self, text: str) -> None:
        token, ctx, base = await self._creds()
        await self.svc.ilink.send_text(self.to, text, token=token, context_token=ctx, base_url=base)

    async def send_file(self, path: Path) -> None:
        token, ctx, base = await self._creds()
        await self.svc.ilink.send_file(self.to, path, token=token, context_token=ctx, base_url=base)


class ILinkPoller:
    def __init__(self, svc: "ChannelsService", binding_id: int, lease: Lease) -> None:
        self.svc = svc
        self.binding_id = binding_id
        self.lease = lease
        self.stopping = asyncio.Event()
        self._recent: OrderedDict[str, None] = OrderedDict()
        self.polls = 0

    def __repr__(self) -> str:
        return f"ILinkPoller(binding_id={self.binding_id})"

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=max(seconds, 0.0))
        except asyncio.TimeoutError:
            pass

    async def run(self) -> None:
        keeper = asyncio.create_task(self.lease.keep())
        loop_task = asyncio.create_task(self._loop())
        lost = asyncio.create_task(self.lease.lost.wait())
        try:
            await asyncio.wait({loop_task, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (loop_task, lost, keeper):
                task.cancel()
            await asyncio.gather(loop_task, lost, keeper, return_exceptions=True)
            await self.lease.release()
            log.info("ilink loop stopped", extra={"binding_id": self.binding_id})

    async def _update(self, fn: Any) -> dict[str, Any] | None:
        return await bindings.update_config(self.svc.sessions, self.binding_id, fn)

    async def _loop(self) -> None:
        failures = 0
        log.info("ilink loop started", extra={"binding_id": self.binding_id})
        while not self.stopping.is_set():
            binding = await bindings.get_binding(self.svc.sessions, self.binding_id)
            if binding is None or not bindings.usable(binding):
                log.info("ilink binding gone or inactive; stopping its loop", extra={"binding_id": self.binding_id})
                return
            cfg = binding.config or {}
            token = bindings.get_secret(self.svc.key, cfg, "bot_token")
            if not token:
                return
            base = cfg.get("baseurl")
            paused_until = float(cfg.get("paused_until") or 0)
            if paused_until > time.time():
                await self._sleep(min(paused_until - time.time(), 5.0))
                continue
            if cfg.get("session") == "expired":
                try:
                    await self.svc.ilink.notifystart(token=token, base_url=base)
                    log.info("ilink notifystart after session pause", extra={"binding_id": self.binding_id})
                except ILinkError as exc:
                    log.warning("ilink notifystart failed", extra={"binding_id": self.binding_id, "error": str(exc)})
            if not self.lease.held():
                return
            self.polls += 1
            try:
                resp = await self.svc.ilink.getupdates(str(cfg.get("cursor") or ""), token=token, base_url=base)
            except SessionExpired:
                pause = self.svc.cs.ilink_session_pause
                log.warning("ilink session expired; pausing the long poll",
                            extra={"binding_id": self.binding_id, "pause_seconds": pause})

                def expire(c: dict[str, Any]) -> dict[str, Any]:
                    c["session"] = "expired"
                    c["paused_until"] = time.time() + pause
                    return c

                await self._update(expire)
                failures = 0
                continue
            except ILinkError as exc:
                failures += 1
                log.warning("ilink getupdates failed", extra={"binding_id": self.binding_id, "error": str(exc),
                                                             "failures": failures})
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    failures = 0
                    await self._sleep(BACKOFF_SECONDS)
                else:
                    await self._sleep(RETRY_DELAY_SECONDS)
                continue
            failures = 0
            if not self.lease.held():
                return  # the new holder re-fetches from the persisted cursor
            for msg in resp.get("msgs") or []:
                try:
                    await self._inbound(binding, msg)
                except Exception:
                    log.exception("ilink inbound message failed", extra={"binding_id": self.binding_id})
            new_cursor = resp.get("get_updates_buf")
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
        key_bytes = self.svc.key

        def remember(c: dict[str, Any]) -> dict[str, Any]:
            if context_token:
                c = bindings.with_secret(key_bytes, c, "context_token", str(context_token))
                c["context_token_at"] = time.time()
            c["peer"] = sender
            return c

        if not await bindings.claim_inbound(self.svc.sessions, self.binding_id, f"ilink:{key}", extra=remember):
            log.info("ilink duplicate dropped", extra={"binding_id": self.binding_id, "msg_key": key})
            return
        text = message_text(msg).strip()
        replier = ILinkReplier(self.svc, self.binding_id, sender)
        if not text:
            if has_media(msg):
                self.svc.spawn(replier.send_text(MEDIA_ONLY_REPLY))
            return
        self.svc.spawn(self._converse(binding.user_id, text, replier))

    async def _converse(self, user_id: str, text: str, replier: ILinkReplier) -> None:
        try:
            outcome = await run_message(self.svc.conversation_deps, user_id, bindings.ILINK, text, replier)
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

