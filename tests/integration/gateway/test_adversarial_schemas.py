"""A batch of hostile JSON Schemas through the gateway to the session's SGLang engines: each
is refused with a 400 naming the limit and the path, or, if accepted, completes; the engine
stays healthy and answers a plain request afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Served

pytestmark = pytest.mark.engine
USER = [{"role": "user", "content": "Answer in JSON."}]


def _props(count: int, required: bool) -> dict[str, Any]:
    names = [f"p{i}" for i in range(count)]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {n: {"type": "string"} for n in names},
    }
    if required:
        schema["required"] = names
    return schema


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def _ref_doubling(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {"d0": {"type": "integer"}}
    for i in range(1, levels):
        twice = [{"$ref": f"#/$defs/d{i - 1}"}] * 2
        defs[f"d{i}"] = {"type": "array", "prefixItems": twice}
    return {"$defs": defs, "$ref": f"#/$defs/d{levels - 1}"}


# (name, schema, the limit a refusal must name; None: may be accepted, must then complete)
HOSTILE: list[tuple[str, dict[str, Any], str | None]] = [
    ("deep nesting", _nested(40), "schema_depth"),
    ("pattern repetition", {"type": "string", "pattern": "^a{1,10000}$"}, "schema_pattern"),
    ("nested quantifiers", {"type": "string", "pattern": "^(a+)+$"}, "schema_pattern"),
    ("lookahead", {"type": "string", "pattern": "^(?=a)a$"}, "schema_pattern"),
    ("int past int64", {"type": "integer", "maximum": 10**30}, "schema_number"),
    ("4,000-digit number", {"type": "integer", "minimum": -(10**4000)}, "schema_number"),
    ("huge maxLength", {"type": "string", "maxLength": 10**9}, "schema_count"),
    ("huge minItems", {"type": "array", "minItems": 10**7}, "schema_count"),
    ("many optional properties", _props(400, required=False), "schema_optional_properties"),
    ("too many properties", _props(1_200, required=True), "schema_properties"),
    ("too many enum values", {"enum": list(range(5_000))}, "schema_enum"),
    ("too many branches", {"anyOf": [{"const": i} for i in range(1_500)]}, "schema_branches"),
    ("remote $ref", {"$ref": "https://example.com/schema.json"}, "schema_ref"),
    ("dangling $ref", {"$ref": "#/$defs/missing"}, "schema_ref"),
    (
        "$ref loop",
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "schema_ref",
    ),
    ("oversized", {"type": "string", "description": "x" * 70_000}, "schema_bytes"),
    # Within the limits: the engine must compile them and answer.
    ("recursive tree", {"type": "object", "properties": {"next": {"$ref": "#"}}}, None),
    ("$ref doubling", _ref_doubling(24), None),
    ("maxLength at the limit", {"type": "string", "maxLength": 100_000}, None),
    ("128 optional properties", _props(128, required=False), None),
]


def _chat(served: Served, client: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"model": served.base, "messages": USER, "max_tokens": 8, **fields}
    return client.post("/v1/chat/completions", json=body)


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=180) as http:
        yield http


@pytest.mark.parametrize(("name", "schema", "limit"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_schema_is_refused_by_name_or_completes(
    served: Served, client: httpx.Client, name: str, schema: dict[str, Any], limit: str | None
) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    response = _chat(served, client, response_format=fmt)
    if limit is None:
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")
        return
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "schema_too_complex", error
    assert error["param"].startswith("response_format.json_schema.schema"), error


def test_the_same_limits_guard_tools_and_the_responses_api(
    served: Served, client: httpx.Client
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": _nested(40)}}
    refused = _chat(served, client, tools=[tool], tool_choice="required")
    assert refused.status_code == 400 and refused.json()["error"]["param"].startswith(
        "tools[0].function.parameters"
    )
    fmt = {"type": "json_schema", "name": "a", "schema": {"type": "string", "pattern": "(a+)+"}}
    body = {"model": served.base, "input": "hi", "text": {"format": fmt}}
    refused = client.post("/v1/responses", json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "text.format.schema.pattern"


def test_the_engines_stay_healthy_and_answer_after_the_batch(
    served: Served, client: httpx.Client
) -> None:
    for engine in served.engines:
        assert httpx.get(f"{engine.url}/health", timeout=30).status_code == 200
    response = _chat(served, client)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] is not None
