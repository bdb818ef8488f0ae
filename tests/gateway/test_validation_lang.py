"""422 texts in the request's language over real routes: Chinese by default (and for a zh-first
Accept-Language), English when the first tag is English; `type` and `loc` as pydantic said."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError, field_validator

from zcbot_gateway import validation_texts
from zcbot_gateway.routes.tasks import RUN_STATUS_VALUES

EN = {"Accept-Language": "en-US,en;q=0.9"}
ZH_FIRST = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
CJK = re.compile(r"[\u4e00-\u9fff]")
TASK = "{task}"  # replaced by a real task's id

# (method, path, request kwargs, type, loc, zh msg, en msg); loc `None` at an index = any int
CASES: list[tuple[str, str, dict[str, Any], str, list[Any], str, str]] = [
    ("POST", "/v1/tasks", {"json": {"name": "x" * 201, "working_dir": "w"}}, "string_too_long",
     ["body", "name"], "至多 200 个字符", "String should have at most 200 characters"),
    ("POST", f"/v1/tasks/{TASK}/messages", {"json": {"content": ""}}, "string_too_short",
     ["body", "content"], "至少 1 个字符", "String should have at least 1 character"),
    ("POST", f"/v1/tasks/{TASK}/messages", {"json": {"content": "hi", "multitask": "nope"}}, "literal_error",
     ["body", "multitask"], "须为以下之一：'reject'、'enqueue'、'interrupt'",
     "Input should be 'reject', 'enqueue' or 'interrupt'"),
    ("POST", "/v1/tasks", {"json": {}}, "missing", ["body", "name"], "此项必填", "Field required"),
    ("POST", "/v1/tasks", {"json": {"name": "ok", "extra": 1}}, "extra_forbidden", ["body", "extra"],
     "不接受此字段", "Extra inputs are not permitted"),
    ("POST", "/v1/tasks", {"content": b'{"name": ', "headers": {"Content-Type": "application/json"}},
     "json_invalid", ["body", None], "请求体不是有效的 JSON", "JSON decode error"),
    ("POST", "/v1/tasks", {"json": []}, "model_attributes_type", ["body"], "须为 JSON 对象",
     "Input should be a valid dictionary or object to extract fields from"),
    ("GET", "/v1/tasks?page_size=0", {}, "greater_than_equal", ["query", "page_size"],
     "须大于或等于 1", "Input should be greater than or equal to 1"),
    ("GET", "/v1/tasks?page_size=101", {}, "less_than_equal", ["query", "page_size"],
     "须小于或等于 100", "Input should be less than or equal to 100"),
    ("GET", "/v1/tasks?page_size=abc", {}, "int_parsing", ["query", "page_size"],
     "须为整数", "Input should be a valid integer, unable to parse string as an integer"),
    ("GET", "/v1/tasks?deleted=maybe", {}, "bool_parsing", ["query", "deleted"],
     "须为布尔值（true 或 false）", "Input should be a valid boolean, unable to interpret input"),
    ("GET", "/v1/tasks?run_status=bogus", {}, "value_error", ["query", "run_status"],
     f"须为以下值（可用逗号分隔多个）：{'、'.join(RUN_STATUS_VALUES)}",
     f"must be a comma-separated list of {', '.join(RUN_STATUS_VALUES)}"),
    ("GET", "/v1/tasks?ordering=nope", {}, "value_error", ["query", "ordering"],
     "不能按 'nope' 排序；可用：", "field 'nope' is not allowed; use one of "),
]


async def _ask(client: httpx.AsyncClient, headers: dict[str, str], task_id: str, case: tuple[Any, ...],
               lang_headers: dict[str, str]) -> httpx.Response:
    method, path, kwargs = case[0], case[1].replace(TASK, task_id), dict(case[2])
    extra = kwargs.pop("headers", {})
    return await client.request(method, path, headers={**headers, **lang_headers, **extra}, **kwargs)


def _same_loc(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and all((w is None and isinstance(g, int)) or g == w for g, w in zip(got, want))


@pytest.mark.parametrize("lang", ["zh", "zh-first", "en"])
async def test_422_texts_follow_the_request_language(app_client: httpx.AsyncClient, make_user, lang: str) -> None:
    h = await make_user(app_client, "alice")
    made = await app_client.post("/v1/tasks", headers=h, json={"name": "v", "working_dir": "v"})
    assert made.status_code == 201, made.text
    lang_headers = {"zh": {}, "zh-first": ZH_FIRST, "en": EN}[lang]
    for case in CASES:
        _, path, _, type_, loc, zh, en = case
        resp = await _ask(app_client, h, made.json()["task_id"], case, lang_headers)
        assert resp.status_code == 422, (path, resp.text)
        assert resp.headers["content-type"] == "application/problem+json"
        problem = resp.json()
        assert problem["code"] == "validation_error" and len(problem["errors"]) == 1, problem
        err = problem["errors"][0]
        assert err["type"] == type_ and _same_loc(err["loc"], loc), (path, err)  # machine-readable: as pydantic said
        want = en if lang == "en" else zh
        assert err["msg"].startswith(want), (path, err["msg"])
        field = loc[-1] if isinstance(loc[-1], str) and loc[-1] not in ("body", "query") else None
        sep = ": " if lang == "en" else "："
        assert problem["detail"] == (f"{field}{sep}{err['msg']}" if field else err["msg"]), problem
        if lang == "en":
            assert not CJK.search(resp.text), resp.text  # never a mix
        else:
            assert CJK.search(err["msg"]) and CJK.search(problem["detail"]), problem


async def test_several_errors_and_a_long_input_stay_one_language_and_bounded(
    app_client: httpx.AsyncClient, make_user
) -> None:
    h = await make_user(app_client, "alice")
    body = {"name": 5, "working_dir": "w" * 5000}
    zh = (await app_client.post("/v1/tasks", headers=h, json=body)).json()
    assert [e["type"] for e in zh["errors"]] == ["string_type", "string_too_long"]
    assert [e["loc"] for e in zh["errors"]] == [["body", "name"], ["body", "working_dir"]]
    assert zh["errors"][1]["msg"] == "至多 1024 个字符"
    assert zh["detail"] == "name：须为字符串（另有 1 处错误）"
    en_resp = await app_client.post("/v1/tasks", headers={**h, **EN}, json=body)
    assert en_resp.json()["detail"] == "name: Input should be a valid string (+1 more)"
    assert len(en_resp.text) < 2000 and "www" not in en_resp.text  # the 5000-character input is not echoed


class _Checked(BaseModel):
    slug: str

    @field_validator("slug")
    @classmethod
    def _no_spaces(cls, value: str) -> str:
        if " " in value:
            raise ValueError("no spaces, please")
        return value


def _errors(model: type[BaseModel], data: Any) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return caught.value.errors()


def test_a_type_without_chinese_text_gets_the_generic_sentence_with_its_field() -> None:
    # A validator's own English (pydantic `value_error`) cannot be translated: zh says it generically.
    err = _errors(_Checked, {"slug": "a b"})[0]
    assert err["type"] == "value_error"
    assert validation_texts.message(err, ["body", "slug"], "zh") == "字段 slug 的值无效"
    assert validation_texts.message(err, ["body", "slug"], "en") == "Value error, no spaces, please"
    odd = {"type": "some_future_type", "loc": ("body",), "msg": "Something new", "ctx": {}}
    assert validation_texts.message(odd, ["body"], "zh") == "请求无效"
    assert validation_texts.message({"type": "string_too_long"}, ["query", "q"], "zh") == "字段 q 的值无效"
