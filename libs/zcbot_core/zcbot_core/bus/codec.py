"""msgpack encoding of the bus dataclasses, tagged by type and protocol version.

Decoding is strict about types it knows and lenient about fields it does not: a newer sender may
add fields (ignored here), while garbage bytes, an unknown tag or a missing required field raise
`BusDecodeError`, which receivers log and drop without dying.

The tag (`t`) and version (`v`) are encoded first, so `tag_of` reads a message's type from its first
bytes: a receiver on a busy subject decodes only the messages it wants.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from zcbot_core.bus.subjects import PROTOCOL_VERSION
from zcbot_core.errors import ZcbotError

T = TypeVar("T")
_REGISTRY: dict[str, type] = {}


class BusDecodeError(ZcbotError, ValueError):
    """Bytes on the bus that are not a valid message of the expected type (the sender's fault)."""

    code = "bus_decode"
    http_status = 502


def message(tag: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: register a dataclass as a bus message under `tag`."""

    def wrap(cls: type[T]) -> type[T]:
        if tag in _REGISTRY:
            raise RuntimeError(f"duplicate bus message tag {tag}")
        if {f.name for f in dataclasses.fields(cls)} & {"t", "v"}:  # type: ignore[arg-type]
            raise RuntimeError(f"bus message {tag}: the field names t and v are the envelope's")
        cls.TAG = tag  # type: ignore[attr-defined]
        _REGISTRY[tag] = cls
        return cls

    return wrap


def encode(msg: Any) -> bytes:
    body = {"t": msg.TAG, "v": PROTOCOL_VERSION, **dataclasses.asdict(msg)}
    return msgpack.packb(body, use_bin_type=True)


_MAP32 = {0xDE: 3, 0xDF: 5}  # map16 / map32 headers and their lengths; a fixmap's is 1 byte


def tag_of(data: bytes) -> str | None:
    """The tag of an encoded message without decoding it (None: not a tagged bus message).

    Reads `t` where `encode` puts it, right after the map header (~0.4 us); bytes laid out otherwise
    (a message encoded before the tag came first, or by a foreign sender) are unpacked whole. Only
    a filter: the message itself is still checked by `decode`.
    """
    try:
        head = data[0]
        i = 1 if 0x80 <= head <= 0x8F else _MAP32[head]
        if data[i:i + 2] == b"\xa1t":  # the key "t" as a fixstr
            size = data[i + 2]
            if 0xA0 <= size <= 0xBF:  # a fixstr tag
                return data[i + 3:i + 3 + size - 0xA0].decode()
            if size == 0xD9:  # a str8 tag
                return data[i + 4:i + 4 + data[i + 3]].decode()
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
        tag = body.get("t") if isinstance(body, dict) else None
        return tag if isinstance(tag, str) else None
    except Exception:  # garbage: empty, truncated, not msgpack, not UTF-8
        return None


_SIMPLE = {str: str, int: int, float: (int, float), bool: bool, dict: dict, list: (list, tuple)}


def _check_type(cls: type, name: str, value: Any, annotation: Any) -> None:
    origin = typing.get_origin(annotation) or annotation
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return
        for opt in options:
            if opt is type(None):
                continue
            try:
                _check_type(cls, name, value, opt)
                return
            except BusDecodeError:
                continue
        raise BusDecodeError(f"{cls.__name__}.{name}: unexpected {type(value).__name__}")
    if origin is typing.Any:
        return
    expected = _SIMPLE.get(origin)
    if expected is None:
        return
    if origin in (int, str) and isinstance(value, bool):
        raise BusDecodeError(f"{cls.__name__}.{name}: expected {origin.__name__}, got bool")
    if not isinstance(value, expected):
        raise BusDecodeError(f"{cls.__name__}.{name}: expected {origin.__name__}, got {type(value).__name__}")


def decode(data: bytes, expected: type[T] | tuple[type, ...] | None = None) -> T:
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise BusDecodeError(f"not msgpack: {exc.__class__.__name__}") from None
    if not isinstance(body, dict):
        raise BusDecodeError("bus message is not a map")
    tag = body.pop("t", None)
    version = body.pop("v", None)
    cls = _REGISTRY.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise BusDecodeError(f"unknown message type {tag!r}")
    if version != PROTOCOL_VERSION:
        raise BusDecodeError(f"unsupported protocol version {version!r} for {tag}")
    if expected is not None:
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if not issubclass(cls, allowed):
            raise BusDecodeError(f"expected {[c.__name__ for c in allowed]}, got {cls.__name__}")
    kwargs: dict[str, Any] = {}
    for name, annotation, required in _fields(cls):
        if name in body:
            _check_type(cls, name, body[name], annotation)
            kwargs[name] = body[name]
        elif required:
            raise BusDecodeError(f"{cls.__name__}: missing field {name}")
    return cls(**kwargs)  # type: ignore[return-value]


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, resolved annotation, required) of each init field: resolving the string annotations
    (`from __future__ import annotations`) per message cost more than the rest of the decode."""
    hints = typing.get_type_hints(cls)
    return tuple((field.name, hints[field.name],
                  field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING)
                 for field in dataclasses.fields(cls) if field.init)
