"""Bad inference requests get OpenAI-shaped 4xx answers and never reach the engine."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import BASE, RANKS, Served
from tests.support.engine_metrics import prompt_tokens

pytestmark = pytest.mark.engine
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def engine_untouched(served: Served) -> Iterator[None]:
    before = prompt_tokens(served.engines)
    yield
    assert prompt_tokens(served.engines) == before, "a refused request reached the engine"


def _post(served: Served, body: object, **kw: object) -> httpx.Response:
    return httpx.post(
        f"{served.url}/v1/chat/completions", json=body, headers=served.headers(), timeout=30, **kw
    )


def _openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def _schema_format(schema: object) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def _tool(name: str = "get_weather", parameters: object = None) -> dict:
    return {
        "type": "function",
        "function": {"name": name, "parameters": parameters or {"type": "object"}},
    }


# Structured outputs, tools, logprobs and the rest: each malformed value, and the parameter
# the 400 must name.
OUTPUT_FIELDS: list[tuple[dict, str]] = [
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (
        {"response_format": _schema_format({"type": "no-such-type"})},
        "response_format.json_schema.schema",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
        "response_format.json_schema.name",
    ),
    ({"tools": [_tool("bad name!")]}, "tools[0].function.name"),
    ({"tools": [_tool(parameters={"type": 12})]}, "tools[0].function.parameters"),
    ({"tools": [_tool(), _tool()]}, "tools[1].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": [_tool()], "tool_choice": "sometimes"}, "tool_choice"),
    (
        {"tools": [_tool()], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tool_choice.function.name",
    ),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logit_bias": {"hello": 5}}, "logit_bias"),
    ({"logit_bias": {"10": 500}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"n": 2, "temperature": 0}, "n"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    (
        {"messages": [*USER, {"role": "tool", "content": "22 C"}]},
        "messages[1].tool_call_id",
    ),
    (
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]},
        "messages[0].tool_calls[0]",
    ),
]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": BASE, "messages": [{"content": "no role"}]}, "messages[0].role"),
        ({"model": BASE, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": BASE, "messages": []}, "messages"),
        ({"model": BASE}, "messages"),
        ({"model": BASE, "messages": USER, "n": 129}, "n"),
        ({"model": BASE, "messages": USER, "temperature": 5}, "temperature"),
        ({"model": BASE, "messages": USER, "top_p": 0}, "top_p"),
        ({"model": BASE, "messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"model": BASE, "messages": USER, "max_tokens": 100_000}, "max_tokens"),
        ({"model": BASE, "messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": BASE, "messages": USER, "logit_bias_typo": {}}, "logit_bias_typo"),
        (
            {"model": BASE, "messages": USER, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        *[({"model": BASE, "messages": USER, **extra}, param) for extra, param in OUTPUT_FIELDS],
    ],
)
def test_invalid_request_is_a_400_naming_the_parameter(
    served: Served, engine_untouched: None, body: dict, param: str
) -> None:
    error = _openai_error(_post(served, body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param or param in error["message"]


def test_prompt_longer_than_the_context_is_refused(served: Served, engine_untouched: None) -> None:
    long_text = " ".join(f"word{i}" for i in range(6000))
    error = _openai_error(
        _post(served, {"model": BASE, "messages": [{"role": "user", "content": long_text}]}), 400
    )
    assert "context" in error["message"]


def test_max_tokens_above_the_plan_is_refused(served: Served, engine_untouched: None) -> None:
    httpx.put(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/quota",
        json={"overrides": {"max_tokens_per_request": 64}},
        headers=served.operator(),
    )
    try:
        # No wait: a quota change drops this replica's cached limits once it is committed.
        error = _openai_error(
            _post(served, {"model": BASE, "messages": USER, "max_tokens": 65}), 400
        )
        assert "64" in error["message"]
    finally:
        httpx.put(
            f"{served.url}/api/v1/tenants/{served.tenant_id}/quota",
            json={"overrides": {}},
            headers=served.operator(),
        )


def test_more_choices_than_the_plan_allows_are_refused(
    served: Served, engine_untouched: None
) -> None:
    quota = f"{served.url}/api/v1/tenants/{served.tenant_id}/quota"
    httpx.put(quota, json={"overrides": {"max_choices_per_request": 2}}, headers=served.operator())
    try:
        body = {"model": BASE, "messages": USER, "n": 3, "temperature": 1}
        error = _openai_error(_post(served, body), 400)
        assert error["param"] == "n" and "2" in error["message"]
    finally:
        httpx.put(quota, json={"overrides": {}}, headers=served.operator())


def test_completions_logprobs_over_five_is_refused(served: Served, engine_untouched: None) -> None:
    response = httpx.post(
        f"{served.url}/v1/completions",
        json={"model": BASE, "prompt": "hi", "logprobs": 6},
        headers=served.headers(),
        timeout=30,
    )
    assert _openai_error(response, 400)["param"] == "logprobs"


def test_non_utf8_and_non_json_bodies_are_refused(served: Served, engine_untouched: None) -> None:
    for raw in [b'{"model": "\xff\xfe"}', b"{not json", b"[]"]:
        response = httpx.post(
            f"{served.url}/v1/chat/completions",
            content=raw,
            timeout=30,
            headers={**served.headers(), "content-type": "application/json"},
        )
        _openai_error(response, 400)


def test_unknown_model_and_another_tenants_adapter_look_the_same(
    served: Served, engine_untouched: None
) -> None:
    adapter, _ = served.adapters[RANKS[0]]
    slug = f"other-{secrets.token_hex(3)}"
    tenant = httpx.post(
        f"{served.url}/api/v1/tenants", json={"slug": slug, "name": slug}, headers=served.operator()
    ).json()
    other_key = httpx.post(
        f"{served.url}/api/v1/tenants/{tenant['id']}/api-keys",
        json={"name": "x", "scopes": ["inference"]},
        headers=served.operator(),
    ).json()["key"]
    other = {"Authorization": f"Bearer {other_key}"}
    theirs = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": adapter, "messages": USER},
        headers=other,
        timeout=30,
    )
    missing = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "no-such-adapter", "messages": USER},
        headers=other,
        timeout=30,
    )
    a, b = _openai_error(theirs, 404), _openai_error(missing, 404)
    assert a["code"] == b["code"] == "model_not_found"
    assert a["message"].replace(adapter, "X") == b["message"].replace("no-such-adapter", "X")


def test_archived_version_is_refused(served: Served, engine_untouched: None) -> None:
    adapter, folder = served.adapters[RANKS[0]]
    files = [
        ("file", (n, (folder / n).read_bytes()))
        for n in ("adapter_config.json", "adapter_model.safetensors")
    ]
    base = f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters/{adapter}/versions"
    number = httpx.post(base, files=files, headers=served.headers(), timeout=60).json()["number"]
    httpx.post(f"{base}/{number}/archive", headers=served.headers(), timeout=30)
    error = _openai_error(_post(served, {"model": f"{adapter}@v{number}", "messages": USER}), 400)
    assert "archived" in error["message"]


def test_missing_or_operator_key_is_refused(served: Served, engine_untouched: None) -> None:
    response = httpx.post(
        f"{served.url}/v1/chat/completions", json={"model": BASE, "messages": USER}, timeout=30
    )
    assert _openai_error(response, 401)["type"] == "authentication_error"
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": BASE, "messages": USER},
        headers=served.operator(),
        timeout=30,
    )
    _openai_error(response, 403)
