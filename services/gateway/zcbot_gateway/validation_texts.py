"""The texts of a 422 in the request's language (`lang.lang_of`: Chinese unless Accept-Language
starts with English). `errors.validation_exception_handler` builds the envelope; this module only
says each `msg` and the `detail` line.

- English: pydantic's own `msg` (already English, with the constraint filled in), unchanged.
- Chinese: `ZH[type]` with the error's `ctx` values filled in (「至多 200 个字符」); an error that
  carries its own Chinese (`http.invalid_query` puts it in `ctx["msg_zh"]`) uses that; any other
  type gets the generic 「字段 X 的值无效」, so a Chinese answer never holds an English sentence.

`type` and `loc` are never touched: they are the machine-readable part.
"""

from __future__ import annotations

import re
from typing import Any

from zcbot_gateway.lang import Catalogue, Lang, say

# Where pydantic puts the field (`loc[0]`): not part of the field's name a person reads.
LOCATIONS = ("body", "query", "path", "header", "cookie")
MAX_VALUE = 100  # one ctx value (a pattern, a list of allowed values) inside a message

_OBJECT = "须为 JSON 对象"
_LIST = "须为数组"
_INT = "须为整数"
_NUMBER = "须为数字"
_BOOL = "须为布尔值（true 或 false）"
_DATE = "须为有效的日期（YYYY-MM-DD）"
_DATETIME = "须为有效的日期时间（ISO 8601，如 2025-01-31T08:00:00Z）"
_URL = "须为有效的网址"
_UUID = "须为有效的 UUID"

# pydantic error `type` -> the Chinese message; `{name}` is the error's `ctx[name]`.
ZH: dict[str, str] = {
    "missing": "此项必填",
    "extra_forbidden": "不接受此字段",
    "json_invalid": "请求体不是有效的 JSON",
    "json_type": "请求体不是有效的 JSON",
    "string_type": "须为字符串",
    "string_unicode": "须为有效的 UTF-8 文本",
    "string_too_short": "至少 {min_length} 个字符",
    "string_too_long": "至多 {max_length} 个字符",
    "string_pattern_mismatch": "格式不符合要求（{pattern}）",
    "string_not_ascii": "只能包含 ASCII 字符",
    "too_short": "至少 {min_length} 项",
    "too_long": "至多 {max_length} 项",
    "bytes_type": "须为字节串",
    "bytes_too_short": "至少 {min_length} 字节",
    "bytes_too_long": "至多 {max_length} 字节",
    "greater_than": "须大于 {gt}",
    "greater_than_equal": "须大于或等于 {ge}",
    "less_than": "须小于 {lt}",
    "less_than_equal": "须小于或等于 {le}",
    "multiple_of": "须为 {multiple_of} 的倍数",
    "finite_number": "须为有限的数字",
    "int_type": _INT,
    "int_parsing": _INT,
    "int_from_float": _INT,
    "int_parsing_size": "整数过大",
    "float_type": _NUMBER,
    "float_parsing": _NUMBER,
    "decimal_type": _NUMBER,
    "decimal_parsing": _NUMBER,
    "decimal_max_digits": "至多 {max_digits} 位数字",
    "decimal_max_places": "至多 {decimal_places} 位小数",
    "decimal_whole_digits": "整数部分至多 {whole_digits} 位",
    "bool_type": _BOOL,
    "bool_parsing": _BOOL,
    "none_required": "须为 null",
    "enum": "须为以下之一：{expected}",
    "literal_error": "须为以下之一：{expected}",
    "model_type": _OBJECT,
    "model_attributes_type": _OBJECT,
    "dataclass_type": _OBJECT,
    "dict_type": _OBJECT,
    "mapping_type": _OBJECT,
    "invalid_key": "对象的键须为字符串",
    "list_type": _LIST,
    "tuple_type": _LIST,
    "set_type": _LIST,
    "frozen_set_type": _LIST,
    "iterable_type": _LIST,
    "uuid_type": _UUID,
    "uuid_parsing": _UUID,
    "uuid_version": "须为第 {expected_version} 版 UUID",
    "date_type": _DATE,
    "date_parsing": _DATE,
    "date_from_datetime_parsing": _DATE,
    "date_from_datetime_inexact": "须为日期，不带时间",
    "datetime_type": _DATETIME,
    "datetime_parsing": _DATETIME,
    "datetime_from_date_parsing": _DATETIME,
    "datetime_object_invalid": _DATETIME,
    "time_type": "须为有效的时间（HH:MM[:SS]）",
    "time_parsing": "须为有效的时间（HH:MM[:SS]）",
    "time_delta_type": "须为有效的时长",
    "time_delta_parsing": "须为有效的时长",
    "timezone_aware": "须带时区",
    "timezone_naive": "不应带时区",
    "url_type": _URL,
    "url_parsing": _URL,
    "url_syntax_violation": _URL,
    "url_too_long": "网址至多 {max_length} 个字符",
    "url_scheme": "网址的协议须为以下之一：{expected_schemes}",
    "union_tag_invalid": "类型 {tag} 无效，须为以下之一：{expected_tags}",
    "union_tag_not_found": "缺少区分类型的字段 {discriminator}",
}

TEXTS: Catalogue = {
    # Any type not in ZH (value_error without its own Chinese, a future pydantic type...); English
    # answers use pydantic's msg, so "unknown" en only keeps the catalogue's {zh, en} shape.
    "unknown": {"zh": "字段 {field} 的值无效", "en": "invalid value for {field}"},
    "unknown_no_field": {"zh": "请求无效", "en": "invalid request"},
    "with_field": {"zh": "{where}：{msg}", "en": "{where}: {msg}"},
    "more": {"zh": "（另有 {n} 处错误）", "en": " (+{n} more)"},
}

# pydantic joins choices as "'a', 'b' or 'c'": in Chinese they are listed with 「、」.
_CHOICE_JOIN = re.compile(r"(?<=['\"\d]), (?=['\"\d])|(?<=['\"\d]) or (?=['\"\d])")


def field_of(loc: list[str | int]) -> str:
    """The field a person reads: `["body", "name"]` -> "name", `["query", "page_size"]` -> "page_size"."""
    return ".".join(p for p in loc if isinstance(p, str) and p not in LOCATIONS)


def _value(value: Any) -> str:
    text = _CHOICE_JOIN.sub("、", str(value))
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def message(err: dict[str, Any], loc: list[str | int], lang: Lang) -> str:
    """One error's `msg` in `lang` (`loc` already made JSON-safe by the caller)."""
    if lang == "en":
        return str(err.get("msg", ""))
    ctx = err.get("ctx") if isinstance(err.get("ctx"), dict) else {}
    if isinstance(ctx.get("msg_zh"), str):
        return ctx["msg_zh"]
    template = ZH.get(str(err.get("type", "")))
    if template is not None:
        try:
            return template.format(**{k: _value(v) for k, v in ctx.items()})
        except (KeyError, IndexError):  # a known type raised without the usual ctx: say it generically
            pass
    field = field_of(loc)
    return say(TEXTS, "unknown", lang, field=field) if field else say(TEXTS, "unknown_no_field", lang)


def summary(first: dict[str, Any] | None, total: int, lang: Lang) -> str:
    """The `detail` line: the first error (with its field) and how many more there are."""
    if first is None:
        return say(TEXTS, "unknown_no_field", lang)
    where = field_of(first["loc"])
    detail = say(TEXTS, "with_field", lang, where=where, msg=first["msg"]) if where else first["msg"]
    return detail + say(TEXTS, "more", lang, n=total - 1) if total > 1 else detail
