"""What `zcbot up` warms once it is up, in the background and said (it takes seconds on a fresh
machine): the first document preview's LibreOffice start (`zcbot_gateway.previews.warm`), paid
before the user first opens a file rather than when they do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping


def warm_previews(env: Mapping[str, str], say: Callable[[str], None], stopping: threading.Event) -> None:
    from zcbot_core.platform.config import load_settings
    from zcbot_gateway.config import GatewaySettings
    from zcbot_gateway.previews import office_available, warm

    try:
        gateway = load_settings(GatewaySettings, env)  # the gateway's own settings: its soffice and uid
        if not office_available(gateway.zcbot_soffice) or stopping.is_set():
            return  # `office_word` already said how to enable previews
        say("warming up document previews (LibreOffice's first start)…")
        took = warm(gateway.zcbot_soffice, gateway.zcbot_preview_uid)
        if not stopping.is_set():
            say(f"document previews ready ({took or 0:.1f}s)")
    except Exception as exc:  # noqa: BLE001 - a failed warm-up only means a slower first preview
        if not stopping.is_set():  # (a stop kills the conversion: no failure worth saying)
            say(f"document previews: the warm-up failed ({exc}); the first preview will take longer")
