"""JSON for the runner without importing `json` (stdlib only; staged beside `tool_runner.py`,
run by the sandbox's python as the sandbox user: see inside/__init__.py).

Cold start matters (first call on a new sandbox), and `import json` pulls in `re` and `enum`,
tens of milliseconds on a busy host. CPython's `_json` accelerator does the real work with no
imports; this wraps it the way `json` does, and falls back to `json` elsewhere.
"""

from __future__ import annotations

try:
    import _json

    class _Context:
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        memo: dict = {}

        @staticmethod
        def parse_constant(name: str) -> float:
            return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]

    _scan = _json.make_scanner(_Context())

    def _default(obj: object) -> object:
        raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")

    _encode = _json.make_encoder(None, _default, _json.encode_basestring, None, ": ", ", ", False, False, True)

    def loads(data: str | bytes) -> object:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        text = text.strip()
        try:
            obj, end = _scan(text, 0)
        except StopIteration as exc:
            raise ValueError(f"invalid JSON at {exc.value}") from None
        if end != len(text):
            raise ValueError("extra data after JSON value")
        return obj

    def dumps(obj: object) -> str:
        return "".join(_encode(obj, 0))

except (ImportError, AttributeError, TypeError):  # not CPython: the plain module
    import json as _fallback

    def loads(data: str | bytes) -> object:
        return _fallback.loads(data)

    def dumps(obj: object) -> str:
        return _fallback.dumps(obj, ensure_ascii=False)
