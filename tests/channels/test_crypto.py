"""WeCom callback crypto against the official vectors, secret sealing, chunking, iLink AES-ECB.

Vectors: sbzhu/weworkapi_python callback/Sample.py (XML version) — token
hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo, EncodingAESKey 6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt,
CorpID ww1436e0e65a779aee (GET echostr + POST message).
"""

from __future__ import annotations

import base64
import struct

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from zcbot_core.channels import wecom_crypto
from zcbot_core.channels.ilink_api import aes_ecb_decrypt, aes_ecb_encrypt, aes_ecb_padded_size, client_version
from zcbot_core.channels.sealing import SealError, key_from_settings, open_sealed, seal
from zcbot_core.channels.text import split_chars, split_utf8
from zcbot_core.channels.wecom_crypto import WeComCrypt, WeComCryptoError
from zcbot_core.platform.config import ConfigError

TOKEN = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo"
AES_KEY = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt"
CORP_ID = "ww1436e0e65a779aee"

GET_TS, GET_NONCE = "1476416373", "47744683"
GET_ECHOSTR = "fsi1xnbH4yQh0+PJxcOdhhK6TDXkjMyhEPA7xB2TGz6b+g7xyAbEkRxN/3cNXW9qdqjnoVzEtpbhnFyq6SVHyA=="
GET_SIG = "012bc692d0a58dd4b10f8dfe5c4ac00ae211ebeb"

POST_TS, POST_NONCE = "1476422779", "1597212914"
POST_SIG = "0c3914025cb4b4d68103f6bfc8db550f79dcf48e"
POST_ENCRYPT = (
    "Kl7kjoSf6DMD1zh7rtrHjFaDapSCkaOnwu3bqLc5tAybhhMl9pFeK8NslNPVdMwmBQTNoW4mY7AIjeLvEl3NyeTkAgGzBhzTtRLNshw2AEew"
    "+kkYcD+Fq72Kt00fT0WnN87hGrW8SqGc+NcT3mu87Ha3dz1pSDi6GaUA6A0sqfde0VJPQbZ9U+3JWcoD4Z5jaU0y9GSh010wsHF8KZD24Yhm"
    "ZH4ch4Ka7ilEbjbfvhKkNL65HHL0J6EYJIZUC2pFrdkJ7MhmEbU2qARR4iQHE7wy24qy0cRX3Mfp6iELcDNfSsPGjUQVDGxQDCWjayJOpcwo"
    "cugux082f49HKYg84EpHSGXAyh+/oxwaWbvL6aSDPOYuPDGOCI8jmnKiypE+"
)
POST_BODY = (
    "<xml><ToUserName><![CDATA[ww1436e0e65a779aee]]></ToUserName>\n"
    f"<Encrypt><![CDATA[{POST_ENCRYPT}]]></Encrypt>\n<AgentID><![CDATA[1000002]]></AgentID>\n</xml>"
)
POST_PLAIN = ("<xml><ToUserName>ww1436e0e65a779aee</ToUserName><FromUserName>ChenJiaShun</FromUserName>"
              "<CreateTime>1476422779</CreateTime><MsgType>text</MsgType><Content>你好</Content>"
              "<MsgId>1456453720</MsgId><AgentID>1000002</AgentID></xml>")


def test_official_get_vector() -> None:
    assert wecom_crypto.signature(TOKEN, GET_TS, GET_NONCE, GET_ECHOSTR) == GET_SIG
    crypt = WeComCrypt(TOKEN, AES_KEY, CORP_ID)
    assert crypt.verify_url(GET_SIG, GET_TS, GET_NONCE, GET_ECHOSTR) == "1288432023552776189"


def test_official_post_vector() -> None:
    assert wecom_crypto.signature(TOKEN, POST_TS, POST_NONCE, POST_ENCRYPT) == POST_SIG
    crypt = WeComCrypt(TOKEN, AES_KEY, CORP_ID)
    xml = crypt.decrypt_msg(POST_BODY, POST_SIG, POST_TS, POST_NONCE)
    assert xml == POST_PLAIN
    fields = wecom_crypto.parse_message(xml)
    assert fields["FromUserName"] == "ChenJiaShun" and fields["Content"] == "你好"
    assert fields["MsgId"] == "1456453720" and fields["MsgType"] == "text"


def test_encrypt_reproduces_the_official_ciphertext() -> None:
    """Known answer: with the official message's random prefix, our encryption yields its exact bytes."""
    key = base64.b64decode(AES_KEY + "=")
    dec = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    raw = dec.update(base64.b64decode(POST_ENCRYPT)) + dec.finalize()
    prefix = raw[:16]
    assert struct.unpack(">I", raw[16:20])[0] == len(POST_PLAIN.encode())
    assert raw[-1] <= 32 and len(raw) % 32 == 0  # PKCS#7 to a multiple of 32 bytes
    assert wecom_crypto.encrypt(key, POST_PLAIN, CORP_ID, random16=prefix) == POST_ENCRYPT


def test_fixed_iv_known_answer_computed_independently() -> None:
    key = bytes(range(32))
    prefix = b"0123456789abcdef"
    msg = "hello 企业微信"
    body = msg.encode()
    plain = prefix + len(body).to_bytes(4, "big") + body + b"wwcorp"
    plain += bytes([32 - len(plain) % 32]) * (32 - len(plain) % 32)
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    expected = base64.b64encode(enc.update(plain) + enc.finalize()).decode()
    encoding = base64.b64encode(key).decode().rstrip("=")
    assert wecom_crypto.encrypt(wecom_crypto.aes_key(encoding), msg, "wwcorp", random16=prefix) == expected
    assert wecom_crypto.decrypt(key, expected, "wwcorp") == msg


def test_rejections() -> None:
    crypt = WeComCrypt(TOKEN, AES_KEY, CORP_ID)
    with pytest.raises(WeComCryptoError):
        crypt.verify_url("0" * 40, GET_TS, GET_NONCE, GET_ECHOSTR)
    with pytest.raises(WeComCryptoError):
        crypt.decrypt_msg(POST_BODY, POST_SIG, POST_TS, "1")  # nonce is signed
    with pytest.raises(WeComCryptoError):
        WeComCrypt(TOKEN, AES_KEY, "wwsomeoneelse").verify_url(GET_SIG, GET_TS, GET_NONCE, GET_ECHOSTR)
    key = base64.b64decode(AES_KEY + "=")
    tampered = bytearray(base64.b64decode(POST_ENCRYPT))
    tampered[-1] ^= 0x55
    with pytest.raises(WeComCryptoError):
        wecom_crypto.decrypt(key, base64.b64encode(bytes(tampered)).decode(), CORP_ID)
    with pytest.raises(WeComCryptoError):
        wecom_crypto.parse_message('<!DOCTYPE x [<!ENTITY a "b">]><xml>&a;</xml>')
    with pytest.raises(WeComCryptoError):
        wecom_crypto.aes_key("short")
    assert "hJqcu" not in repr(crypt)


def test_round_trip_envelope() -> None:
    crypt = WeComCrypt(TOKEN, AES_KEY, CORP_ID)
    envelope = crypt.encrypt_msg(POST_PLAIN, "42", "1700000000")
    enc = wecom_crypto.extract_encrypt(envelope)
    sig = wecom_crypto.signature(TOKEN, "1700000000", "42", enc)
    assert crypt.decrypt_msg(envelope, sig, "1700000000", "42") == POST_PLAIN


def test_split_utf8_keeps_characters_and_limit() -> None:
    text = ("第一段：" + "报告内容" * 100 + "\n") * 6 + "end"
    chunks = split_utf8(text, 2048)
    assert "".join(chunks) == text and len(chunks) >= 3
    assert all(len(c.encode()) <= 2048 for c in chunks)
    assert chunks[0].endswith("\n")  # prefers paragraph boundaries
    emoji = "😀" * 1000
    assert all(len(c.encode()) <= 2048 for c in split_utf8(emoji, 2048)) and "".join(split_utf8(emoji, 2048)) == emoji
    assert split_utf8("", 2048) == [] and split_chars("abc", 2) == ["ab", "c"]


def test_sealing() -> None:
    key = bytes(range(32))
    token = seal(key, "bot-token-秘密")
    assert "bot-token" not in token and token.startswith("v1.")
    assert open_sealed(key, token) == "bot-token-秘密"
    assert seal(key, "x") != seal(key, "x")  # fresh nonce
    with pytest.raises(SealError):
        open_sealed(bytes(32), token)
    with pytest.raises(SealError):
        open_sealed(key, token[:-4] + ("A" if token[-4] != "A" else "B") + token[-3:])
    with pytest.raises(SealError):
        open_sealed(key, "plain")

    class S:
        zcbot_channel_secret_key = "ab" * 32

    assert key_from_settings(S()) == bytes.fromhex("ab" * 32)
    S.zcbot_channel_secret_key = "abcd"
    with pytest.raises(ConfigError):
        key_from_settings(S())


def test_ilink_aes_ecb_and_headers() -> None:
    key = bytes(range(16))
    for size in (0, 1, 15, 16, 17, 1000):
        data = bytes(range(256)) * 4
        data = data[:size]
        enc = aes_ecb_encrypt(data, key)
        assert len(enc) == aes_ecb_padded_size(size)
        assert aes_ecb_decrypt(enc, key) == data
    assert aes_ecb_padded_size(16) == 32 and aes_ecb_padded_size(15) == 16
    assert client_version("1.0.11") == str(0x0001000B)
