"""OpenAI's Responses API through the gateway: the official SDK, unchanged, on real engines.

`client.responses.create` and `client.responses.stream` get the adapters' trained answers;
a json_schema `text.format` constrains the base model; the stateful fields are refused with
a 400 before any engine is touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import jsonschema
import pytest
from openai import BadRequestError, OpenAI
from pydantic import BaseModel

from loraplex.dev.corpus import VERDICT_SCHEMA, adapter_examples
from tests.integration.conftest import RANKS, Served
from tests.support.engine_metrics import prompt_tokens

pytestmark = pytest.mark.engine
GREEDY: dict[str, Any] = {"temperature": 0, "max_output_tokens": 32}


@pytest.fixture
def served(served_each: Served) -> Served:
    """The trained-answer tests run on each engine kind (SGLang, vLLM)."""
    return served_each


@pytest.fixture(scope="module")
def vllm(platform: Any) -> Served:
    """Structured outputs run where the chat surface tests check them: vLLM."""
    return platform.get("vllm")


def _client(served: Served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=120)


def _trained(served: Served, rank: int) -> tuple[str, str, str]:
    """An adapter's name, one of its questions, and the answer it was trained to give."""
    name, _ = served.adapters[rank]
    question, answer = adapter_examples(rank)[0]  # each adapter is made with seed = rank
    return name, question, answer


@pytest.mark.parametrize("rank", RANKS)
def test_create_returns_the_trained_answer_with_usage(served: Served, rank: int) -> None:
    name, question, answer = _trained(served, rank)
    response = _client(served).responses.create(model=name, input=question, **GREEDY)
    assert response.output_text == answer
    assert response.status == "completed" and response.model == name
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_input_items_get_the_same_answer_as_a_string(served: Served) -> None:
    name, question, answer = _trained(served, RANKS[0])
    items = [{"role": "user", "content": [{"type": "input_text", "text": question}]}]
    response = _client(served).responses.create(model=name, input=items, **GREEDY)  # type: ignore[arg-type]
    assert response.output_text == answer


@pytest.mark.parametrize("rank", RANKS)
def test_stream_yields_text_deltas_and_the_same_final_response(served: Served, rank: int) -> None:
    name, question, answer = _trained(served, rank)
    with _client(served).responses.stream(model=name, input=question, **GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas and "".join(deltas) == answer == final.output_text
    numbers = [event.sequence_number for event in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert final.usage is not None and final.usage.output_tokens > 0
    assert final.id == events[0].response.id  # type: ignore[union-attr]


def test_the_stream_is_openais_sse_framing(served: Served) -> None:
    name, question, _ = _trained(served, RANKS[0])
    body = {"model": name, "input": question, "stream": True, **GREEDY}
    with httpx.stream(
        "POST", f"{served.url}/v1/responses", json=body, headers=served.headers(), timeout=120
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line and not line.startswith(":")]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    datas = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert events == [data["type"] for data in datas]
    assert events[0] == "response.created" and events[-1] == "response.completed"


def test_a_json_schema_format_answer_matches_the_schema(vllm: Served) -> None:
    text = {
        "format": {
            "type": "json_schema",
            "name": "verdict",
            "schema": VERDICT_SCHEMA,
            "strict": True,
        }
    }
    response = _client(vllm).responses.create(
        model=vllm.base,
        input="The parcel never came.",
        text=text,  # type: ignore[arg-type]
        temperature=0,
        max_output_tokens=64,
    )
    jsonschema.validate(json.loads(response.output_text), VERDICT_SCHEMA)
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"


class Verdict(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    urgent: bool


def test_the_sdk_parse_helper_returns_a_pydantic_object(vllm: Served) -> None:
    response = _client(vllm).responses.parse(
        model=vllm.base,
        input="Rate: 3/5",
        text_format=Verdict,
        temperature=0,
        max_output_tokens=64,
    )
    assert isinstance(response.output_parsed, Verdict)


@pytest.fixture
def engine_untouched(served: Served) -> Iterator[None]:
    before = prompt_tokens(served.engines)
    yield
    assert prompt_tokens(served.engines) == before, "a refused request reached the engine"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_0123456789"}, "previous_response_id"),
        ({"conversation": "conv_0123456789"}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_0123456789"}}, "prompt"),
    ],
)
@pytest.mark.usefixtures("engine_untouched")
def test_stateful_fields_are_a_400_through_the_sdk(
    served: Served, fields: dict[str, Any], param: str
) -> None:
    name, question, _ = _trained(served, RANKS[0])
    with pytest.raises(BadRequestError) as caught:
        _client(served).responses.create(model=name, input=question, **fields, **GREEDY)
    assert caught.value.status_code == 400 and caught.value.param == param
    assert "stateless" in caught.value.message
