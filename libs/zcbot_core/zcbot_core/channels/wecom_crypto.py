"""WeCom callback crypto, byte-compatible with the official WXBizMsgCrypt library.

- Signature: lowercase hex ``sha1("".join(sorted([token, timestamp, nonce, encrypt])))``.
- Key: ``b64decode(EncodingAESKey + "=")`` (32 bytes); AES-256-CBC with IV = key[:16].
- Plaintext: 16 random bytes || uint32 big-endian msg length || msg || receiveid (the CorpID),
  PKCS#7-padded to a multiple of 32 bytes (not 16: the library's block size is 32), base64.
- Decrypt checks the padding, the length field and the receiveid.

Verified against the official sample vectors (tests/channels/test_wecom_crypto.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from zcbot_core.errors import ZcbotError

PAD_BLOCK = 32


class WeComCryptoError(ZcbotError, ValueError):
    """A callback that fails verification or decryption (never says why in detail to the sender)."""

    code = "wecom_crypto"
    http_status = 403


def signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode("utf-8")).hexdigest()


def aes_key(encoding_aes_key: str) -> bytes:
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError):
        raise WeComCryptoError("EncodingAESKey is not valid base64") from None
    if len(key) != 32:
        raise WeComCryptoError("EncodingAESKey must decode to 32 bytes (43 characters)")
    return key


def pkcs7_pad(data: bytes, block: int = PAD_BLOCK) -> bytes:
    amount = block - (len(data) % block)
    return data + bytes([amount]) * amount


def pkcs7_unpad(data: bytes, block: int = PAD_BLOCK) -> bytes:
    if not data:
        raise WeComCryptoError("empty plaintext")
    amount = data[-1]
    if amount < 1 or amount > block or data[-amount:] != bytes([amount]) * amount:
        raise WeComCryptoError("bad padding")
    return data[:-amount]


def encrypt(key: bytes, msg: str, receiveid: str, random16: bytes | None = None) -> str:
    """Encrypt `msg` for `receiveid`; `random16` only for known-answer tests."""
    prefix = random16 if random16 is not None else os.urandom(16)
    if len(prefix) != 16:
        raise ValueError("random prefix must be 16 bytes")
    body = msg.encode("utf-8")
    plain = prefix + struct.pack(">I", len(body)) + body + receiveid.encode("utf-8")
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(enc.update(pkcs7_pad(plain)) + enc.finalize()).decode("ascii")


def decrypt(key: bytes, encrypted: str, receiveid: str) -> str:
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError):
        raise WeComCryptoError("ciphertext is not valid base64") from None
    if not raw or len(raw) % 16:
        raise WeComCryptoError("ciphertext length is not a multiple of the AES block")
    dec = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = pkcs7_unpad(dec.update(raw) + dec.finalize())
    if len(plain) < 20:
        raise WeComCryptoError("plaintext too short")
    (length,) = struct.unpack(">I", plain[16:20])
    if 20 + length > len(plain):
        raise WeComCryptoError("bad message length")
    msg = plain[20:20 + length]
    if not hmac.compare_digest(plain[20 + length:], receiveid.encode("utf-8")):
        raise WeComCryptoError("receiveid mismatch")
    try:
        return msg.decode("utf-8")
    except UnicodeDecodeError:
        raise WeComCryptoError("message is not UTF-8") from None


@dataclass
class WeComCrypt:
    """One app's callback crypto (token, EncodingAESKey, CorpID as the receiveid)."""

    token: str
    encoding_aes_key: str
    receiveid: str
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = aes_key(self.encoding_aes_key)

    def __repr__(self) -> str:  # never print the token or key
        return f"WeComCrypt(receiveid={self.receiveid!r})"

    def _check(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> None:
        expected = signature(self.token, timestamp, nonce, encrypted)
        if not hmac.compare_digest(expected, (msg_signature or "").lower()):
            raise WeComCryptoError("signature mismatch")

    def verify_url(self, msg_signature: str, timestamp: str, nonce: str, echostr: str) -> str:
        """GET verification: the decrypted echostr to answer with (as is, no quotes/newline)."""
        self._check(msg_signature, timestamp, nonce, echostr)
        return decrypt(self.key, echostr, self.receiveid)

    def decrypt_msg(self, post_body: str | bytes, msg_signature: str, timestamp: str, nonce: str) -> str:
        """POST: extract <Encrypt>, check the signature, decrypt; returns the inner XML."""
        encrypted = extract_encrypt(post_body)
        self._check(msg_signature, timestamp, nonce, encrypted)
        return decrypt(self.key, encrypted, self.receiveid)

    def encrypt_msg(self, reply_xml: str, nonce: str, timestamp: str | None = None) -> str:
        """A passive-reply envelope (EncryptMsg); unused by zcbot (replies go via message/send)."""
        ts = timestamp or str(int(time.time()))
        enc = encrypt(self.key, reply_xml, self.receiveid)
        sig = signature(self.token, ts, nonce, enc)
        return (f"<xml>\n<Encrypt><![CDATA[{enc}]]></Encrypt>\n<MsgSignature><![CDATA[{sig}]]></MsgSignature>\n"
                f"<TimeStamp>{ts}</TimeStamp>\n<Nonce><![CDATA[{nonce}]]></Nonce>\n</xml>")


MAX_XML_BYTES = 64 * 1024


def _parse(xml: str | bytes) -> ET.Element:
    data = xml.encode("utf-8") if isinstance(xml, str) else xml
    if len(data) > MAX_XML_BYTES:
        raise WeComCryptoError("XML body too large")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:  # no entity expansion games
        raise WeComCryptoError("XML with a DTD is not accepted")
    try:
        return ET.fromstring(data)
    except ET.ParseError:
        raise WeComCryptoError("body is not XML") from None


def extract_encrypt(post_body: str | bytes) -> str:
    node = _parse(post_body).find("Encrypt")
    if node is None or not (node.text or "").strip():
        raise WeComCryptoError("no <Encrypt> in the body")
    return node.text.strip()


def parse_message(xml: str) -> dict[str, str]:
    """The decrypted message's top-level fields (ToUserName, FromUserName, MsgType, Content, MsgId, ...)."""
    root = _parse(xml)
    return {child.tag: (child.text or "") for child in root}
