"""AES-256-GCM sealing of channel secrets stored in `channel_bindings.config` (seed 003 §8.7).

A sealed value is the string ``"v1." + base64url(nonce(12) || ciphertext || tag(16))``: opaque,
ASCII, safe to keep in JSONB. The key is ``bytes.fromhex(settings.zcbot_channel_secret_key)``
(32 bytes; `zcbot up` generates one). Tampering, truncation or a wrong key raise `SealError`
without saying anything about the plaintext. Plaintexts never appear in exceptions or logs.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import ConfigError

VERSION = "v1"
NONCE_BYTES = 12
TAG_BYTES = 16


class SealError(ZcbotError, ValueError):
    """A sealed value could not be opened (wrong key, tampered, truncated or not a sealed value)."""

    code = "seal_error"


def key_from_settings(settings: object) -> bytes:
    """The 32-byte sealing key from `settings.zcbot_channel_secret_key` (hex); ConfigError if unusable."""
    raw = getattr(settings, "zcbot_channel_secret_key", None)
    if not raw:
        raise ConfigError("ZCBOT_CHANNEL_SECRET_KEY must be set (64 hex characters) to store WeChat channel credentials")
    try:
        key = bytes.fromhex(raw.strip())
    except ValueError:
        raise ConfigError("ZCBOT_CHANNEL_SECRET_KEY must be hex (64 hex characters = 32 bytes)") from None
    if len(key) != 32:
        raise ConfigError("ZCBOT_CHANNEL_SECRET_KEY must be 32 bytes (64 hex characters)")
    return key


def _check_key(key: bytes) -> None:
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ValueError("the sealing key must be 32 bytes")


def seal(key: bytes, plaintext: str) -> str:
    """Encrypt `plaintext` (str) with a fresh random nonce; returns the printable sealed form."""
    _check_key(key)
    nonce = os.urandom(NONCE_BYTES)
    body = AESGCM(bytes(key)).encrypt(nonce, plaintext.encode("utf-8"), VERSION.encode())
    return f"{VERSION}." + base64.urlsafe_b64encode(nonce + body).decode("ascii").rstrip("=")


def open_sealed(key: bytes, token: str) -> str:
    """Decrypt a value made by `seal`; raises SealError when it cannot be opened."""
    _check_key(key)
    if not isinstance(token, str) or not token.startswith(VERSION + "."):
        raise SealError("not a sealed value")
    data = token[len(VERSION) + 1:]
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (ValueError, TypeError):
        raise SealError("sealed value is not valid base64") from None
    if len(raw) < NONCE_BYTES + TAG_BYTES:
        raise SealError("sealed value is truncated")
    try:
        plain = AESGCM(bytes(key)).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], VERSION.encode())
    except InvalidTag:
        raise SealError("sealed value could not be opened (wrong key or tampered)") from None
    return plain.decode("utf-8")
