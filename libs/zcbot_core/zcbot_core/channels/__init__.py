"""WeChat channels (seed 003 §8.7): code shared by the gateway (WeCom callback, binding routes) and
the channels service (iLink long-poll loops, push delivery).

- `settings`: channel configuration read from the environment (`ChannelSettings.from_env()`).
- `wecom_crypto`: WeCom callback signature + AES-256-CBC message crypto (WXBizMsgCrypt-compatible).
- `wecom_api`: WeCom app client: access-token cache, message/send (text, file), media/upload.
- `ilink_api`: personal-WeChat ClawBot (iLink) client: QR login, getupdates, sendmessage, CDN upload.
- `bindings`: `channel_bindings` rows: sealed secrets, per-binding config updates, inbound dedupe.
- `conversation`: one persistent task per user and channel; inbound message -> run -> reply.
- `wecom_callback`: the gateway's half of WeCom (signature, decryption, hand-off to `CHANNEL_IN`);
  the conversation half is the channels service's `zcbot_channels.wecom`.
- `text`: splitting replies into protocol-sized chunks.
- `sealing`: AES-256-GCM sealing of the secrets kept in `channel_bindings.config`.
- `push`: `send_to_user`, a request to the channels service to deliver text or a file (tools, scheduler).

Secrets (bot_token, context_token, WeCom corp secret / token / AES key, access tokens) are never
logged, never returned by an API and never written under a user's root (the sandbox's view).
"""

CHANNELS = ("wecom", "ilink")
