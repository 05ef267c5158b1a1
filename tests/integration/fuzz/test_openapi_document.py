"""The OpenAPI document describes the bodies the handlers read themselves, and the real errors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from loraplex.gateway.buffer import ChoicePart, StreamBuffer, Taken
from loraplex.gateway.openapi import CHAT_COMPLETION, TEXT_COMPLETION
from loraplex.gateway.replies import completion_body

BODIES = {
    ("/v1/chat/completions", "post"): ("application/json", "ChatCompletionRequest"),
    ("/v1/completions", "post"): ("application/json", "CompletionRequest"),
    ("/v1/responses", "post"): ("application/json", "ResponsesRequest"),
    ("/v1/fine_tuning/jobs", "post"): ("application/json", "JobCreate"),
    ("/v1/files", "post"): ("multipart/form-data", None),
}


@pytest.fixture(scope="module")
async def document(client: AsyncTestClient[Litestar]) -> dict[str, Any]:
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


@pytest.mark.parametrize(("path", "method"), list(BODIES))
def test_each_v1_body_is_described(document: dict[str, Any], path: str, method: str) -> None:
    media_type, component = BODIES[(path, method)]
    body = document["paths"][path][method]["requestBody"]
    schema = body["content"][media_type]["schema"]
    if component is None:
        assert schema["required"] == ["file", "purpose"]
    else:
        assert schema == {"$ref": f"#/components/schemas/{component}"}
        assert "model" in document["components"]["schemas"][component]["properties"]


def test_errors_are_described_as_sent(document: dict[str, Any]) -> None:
    """OpenAI's error object on /v1, a problem document elsewhere; no Litestar default 400."""
    chat = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    tenants = document["paths"]["/api/v1/tenants"]["post"]["responses"]
    assert "400" not in chat and "400" not in tenants
    assert chat["4XX"]["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIError")
    problem = tenants["4XX"]["content"]["application/problem+json"]["schema"]
    assert problem["$ref"].endswith("/Problem")
    assert not any(path.startswith("/schema") for path in document["paths"])


@pytest.mark.parametrize(
    ("kind", "schema"), [("chat", CHAT_COMPLETION), ("completion", TEXT_COMPLETION)]
)
def test_the_documented_completion_matches_what_the_gateway_builds(
    kind: str, schema: dict[str, Any]
) -> None:
    call = SimpleNamespace(
        kind=kind, request=SimpleNamespace(choices=2), target=SimpleNamespace(model="m")
    )
    taken = Taken(parts=[ChoicePart(0, "hello", finish_reason="stop")])
    body = completion_body("id-1", call, taken, StreamBuffer(max_bytes=1024))  # type: ignore[arg-type]
    jsonschema.validate(body, schema)
