"""The Responses API answers: bodies and event streams the official SDK's own types accept.

Every body is checked with `openai.types.responses.Response.model_validate` and every
event with the SDK's `ResponseStreamEvent` union; the SDK itself then reads the bytes, over
an offline transport, through `client.responses.create` and `client.responses.stream`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pydantic
import pytest
from litestar import Litestar
from litestar.di import Provide
from litestar.testing import TestClient
from openai import BadRequestError, OpenAI
from openai.types.responses import Response, ResponseStreamEvent

from loraplex.auth.principal import Principal
from loraplex.control.quotas import Quotas
from loraplex.errors import InvalidInput, exception_handlers
from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.limits import TenantLimits
from loraplex.gateway.relay import encode_events, until_disconnect
from loraplex.gateway.resolve import Target
from loraplex.gateway.responses_body import request_echo, response_body
from loraplex.gateway.responses_controller import ResponsesController
from loraplex.gateway.responses_events import ResponsesEncoder
from loraplex.gateway.responses_schema import decode_request, to_chat
from loraplex.gateway.service import AdmittedRequest, Gateway

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
RESPONSE_ID = "resp_abc123"
TOKENS = (7, 5)  # prompt, completion
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
Step = str | dict[str, Any]  # text, or push() keywords


def _echo(**fields: Any) -> dict[str, Any]:
    request = decode_request(json.dumps({"model": "bot", "input": "hi", **fields}).encode())
    to_chat(request)
    return request_echo(request)


def _push(buffer: StreamBuffer, step: Step) -> None:
    if isinstance(step, str):
        buffer.push(step)
    else:
        buffer.push(
            step.get("text", ""), tool_calls=step.get("tool_calls"), logprobs=step.get("logprobs")
        )


def _end(buffer: StreamBuffer, finish: str, fail: tuple[str, str] | None) -> None:
    buffer.prompt_tokens, buffer.completion_tokens = TOKENS
    if fail is not None:
        buffer.fail(*fail)
    else:
        buffer.finish(finish)


def _body(*steps: Step, finish: str = "stop", **fields: Any) -> dict[str, Any]:
    buffer = StreamBuffer(max_bytes=1 << 20)
    for step in steps:
        _push(buffer, step)
    _end(buffer, finish, None)
    return response_body(RESPONSE_ID, "bot", _echo(**fields), buffer.take(), buffer, created_at=1)


async def _sse(
    *steps: Step, finish: str = "stop", fail: tuple[str, str] | None = None, **fields: Any
) -> list[bytes]:
    """The SSE events of a stream whose engine sends `steps`, each in its own take."""
    buffer = StreamBuffer(max_bytes=1 << 20)
    encoder = ResponsesEncoder(RESPONSE_ID, "bot", _echo(**fields), created_at=1)
    events = encode_events(encoder, buffer, include_usage=True, heartbeat_s=None)
    sent = list(await anext(events))
    for step in steps:
        _push(buffer, step)
        sent += await anext(events)
    _end(buffer, finish, fail)
    async for batch in events:
        sent += batch
    return sent


def _parsed(events: list[bytes]) -> list[dict[str, Any]]:
    """Each event's data, checked: framing, the SDK's types, consecutive sequence numbers."""
    parsed = []
    for raw in events:
        text = raw.decode()
        assert text.endswith("\n\n")
        head, data = text.removesuffix("\n\n").split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        EVENTS.validate_python(event)
        parsed.append(event)
    assert [e["sequence_number"] for e in parsed] == list(range(len(parsed)))
    return parsed


def _call(
    index: int, *, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict:
    function: dict[str, Any] = {"arguments": arguments}
    head: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        head |= {"id": call_id, "type": "function"}
        function["name"] = name
    return head


TEXT_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
]
TEXT_DONE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


# Bodies


def test_a_text_answer_is_a_completed_response_with_usage() -> None:
    body = _body("Hello", " world", instructions="Be kind.", max_output_tokens=40)
    response = Response.model_validate(body)
    assert response.output_text == "Hello world" and response.status == "completed"
    assert response.id == RESPONSE_ID and response.object == "response" and response.model == "bot"
    assert response.output[0].id == "msg_abc123" and response.output[0].status == "completed"
    assert (
        response.usage is not None
        and (response.usage.input_tokens, response.usage.output_tokens) == TOKENS
    )
    assert (
        response.usage.total_tokens == 12 and response.usage.input_tokens_details.cached_tokens == 0
    )
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert (response.instructions, response.max_output_tokens, response.error) == (
        "Be kind.",
        40,
        None,
    )
    assert (response.tools, response.tool_choice, response.parallel_tool_calls) == (
        [],
        "auto",
        True,
    )
    assert (
        response.text is not None
        and response.text.format is not None
        and response.text.format.type == "text"
    )


def test_an_answer_cut_at_the_limit_is_incomplete() -> None:
    response = Response.model_validate(_body("Hel", finish="length"))
    assert response.status == "incomplete" and response.output[0].status == "incomplete"
    assert (
        response.incomplete_details is not None
        and response.incomplete_details.reason == "max_output_tokens"
    )
    assert response.output_text == "Hel"


def test_function_calls_are_output_items_after_any_text() -> None:
    call = _call(0, arguments='{"city": "Paris"}', call_id="call_x", name="get_weather")
    body = _body({"tool_calls": [call]}, finish="tool_calls", tools=[WEATHER])
    response = Response.model_validate(body)
    assert [item.type for item in response.output] == ["function_call"]
    item = response.output[0]
    assert item.type == "function_call"
    assert (item.call_id, item.name, item.arguments, item.id) == (
        "call_x",
        "get_weather",
        '{"city": "Paris"}',
        "fc_abc123_0",
    )
    assert response.status == "completed" and response.tools[0].type == "function"
    with_text = Response.model_validate(
        _body("Let me check.", {"tool_calls": [call]}, tools=[WEATHER])
    )
    assert [item.type for item in with_text.output] == ["message", "function_call"]


def test_an_empty_answer_is_one_empty_message() -> None:
    response = Response.model_validate(_body())
    assert response.output_text == "" and len(response.output) == 1


def test_the_json_schema_format_is_echoed_in_openais_shape() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "point", "schema": schema, "strict": True}
    response = Response.model_validate(_body('{"x": 1}', text={"format": fmt}))
    assert response.text is not None and response.text.format is not None
    assert response.text.format.model_dump(by_alias=True, exclude_none=True) == fmt


def test_logprobs_are_in_the_output_text_part() -> None:
    entry = {
        "token": "Hi",
        "logprob": -0.5,
        "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": None}],
    }
    body = _body(
        {"text": "Hi", "logprobs": {"content": [entry]}}, include=["message.output_text.logprobs"]
    )
    part = Response.model_validate(body).output[0].content[0]
    assert part.type == "output_text" and part.logprobs is not None
    assert part.logprobs[0].bytes == [72, 105] and part.logprobs[0].top_logprobs[0].bytes == [
        72,
        105,
    ]


def test_the_sdks_types_do_reject_a_malformed_body() -> None:
    body = _body("x")
    del body["output"][0]["content"][0]["annotations"]
    with pytest.raises(pydantic.ValidationError):
        Response.model_validate(body)  # so passing it above means something


# Event streams


async def test_a_text_stream_is_openais_event_sequence() -> None:
    events = _parsed(await _sse("Hel", "lo", instructions="Be kind."))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        *TEXT_EVENTS,
        "response.output_text.delta",
        *TEXT_DONE,
        "response.completed",
    ]
    created = events[0]["response"]
    assert (
        created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    )
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["Hel", "lo"]
    assert all(
        (d["item_id"], d["output_index"], d["content_index"], d["logprobs"])
        == ("msg_abc123", 0, 0, [])
        for d in deltas
    )
    assert events[-4]["text"] == "Hello"
    final = Response.model_validate(events[-1]["response"])
    assert (
        final.output_text == "Hello"
        and final.status == "completed"
        and final.instructions == "Be kind."
    )
    assert (
        final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == TOKENS
    )


async def test_the_streamed_final_response_equals_the_body() -> None:
    steps = ("Hel", "lo")
    streamed = _parsed(await _sse(*steps))[-1]["response"]
    whole = _body(*steps)
    for body in (streamed, whole):
        body.pop("completed_at")
    assert streamed == whole


async def test_a_function_call_closes_the_message_before_it() -> None:
    steps = (
        "Checking.",
        {"tool_calls": [_call(0, arguments='{"city": ', call_id="call_x", name="get_weather")]},
        {"tool_calls": [_call(0, arguments='"Paris"}')]},
        {"tool_calls": [_call(1, arguments="{}", call_id="call_y", name="get_weather")]},
    )
    events = _parsed(await _sse(*steps, finish="tool_calls", tools=[WEATHER]))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        *TEXT_EVENTS,
        *TEXT_DONE,
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"]) for a in added] == [
        (0, "message"),
        (1, "function_call"),
        (2, "function_call"),
    ]
    assert added[1]["item"]["call_id"] == "call_x" and added[1]["item"]["arguments"] == ""
    final = Response.model_validate(events[-1]["response"])
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_x", '{"city": "Paris"}'),
        ("call_y", "{}"),
    ]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [d["arguments"] for d in done] == ['{"city": "Paris"}', "{}"]


async def test_a_stream_cut_at_the_limit_ends_incomplete() -> None:
    events = _parsed(await _sse("Hel", finish="length"))
    assert events[-1]["type"] == "response.incomplete"
    final = Response.model_validate(events[-1]["response"])
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert (
        final.incomplete_details.reason == "max_output_tokens"
        and final.output[0].status == "incomplete"
    )
    assert final.usage is not None


async def test_an_empty_stream_still_has_one_message() -> None:
    events = _parsed(await _sse())
    assert [e["type"] for e in events][2:] == [*TEXT_EVENTS[:2], *TEXT_DONE, "response.completed"]


async def test_a_failed_stream_ends_with_response_failed() -> None:
    events = _parsed(
        await _sse("partial", fail=("engine_died", "the engine stopped mid-stream: gone"))
    )
    assert [e["type"] for e in events][-2:] == ["response.output_text.delta", "response.failed"]
    failed = Response.model_validate(events[-1]["response"])
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.message) == (
        "server_error",
        "the engine stopped mid-stream: gone",
    )
    assert failed.output_text == "partial" and failed.output[0].status == "incomplete"


async def test_streamed_logprobs_are_on_the_text_events() -> None:
    entry = {"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}
    events = _parsed(await _sse({"text": "Hi", "logprobs": {"content": [entry]}}, top_logprobs=0))
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    assert delta["logprobs"] == [{"token": "Hi", "logprob": -0.25, "top_logprobs": []}]
    final = Response.model_validate(events[-1]["response"])
    assert final.output[0].content[0].logprobs[0].logprob == -0.25


def test_the_sdks_event_types_do_reject_a_malformed_event() -> None:
    with pytest.raises(pydantic.ValidationError):
        EVENTS.validate_python(
            {"type": "response.output_text.delta", "delta": "x", "sequence_number": 0}
        )


# The SDK reading the bytes


def _sdk(handler: Any) -> OpenAI:
    transport = httpx2.MockTransport(handler)
    return OpenAI(
        api_key="k",
        base_url="http://loraplex.test/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def _serving(payload: bytes, content_type: str) -> OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/responses"
        return httpx2.Response(200, content=payload, headers={"content-type": content_type})

    return _sdk(handler)


def test_the_sdk_stream_accumulates_the_final_response() -> None:
    payload = b"".join(asyncio.run(_sse("Hel", "lo", " there")))
    with _serving(payload, "text/event-stream").responses.stream(model="bot", input="hi") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 3
    assert (
        final.output_text == "Hello there"
        and final.usage is not None
        and final.usage.output_tokens == 5
    )


def test_the_sdk_stream_accumulates_function_calls() -> None:
    steps = (
        {"tool_calls": [_call(0, arguments='{"city":', call_id="call_x", name="get_weather")]},
        {"tool_calls": [_call(0, arguments='"Paris"}')]},
    )
    payload = b"".join(asyncio.run(_sse(*steps, finish="tool_calls", tools=[WEATHER])))
    client = _serving(payload, "text/event-stream")
    with client.responses.stream(
        model="bot", input="hi", tools=[{**WEATHER, "strict": None}]
    ) as stream:
        snapshots = [
            e.snapshot for e in stream if e.type == "response.function_call_arguments.delta"
        ]
        final = stream.get_final_response()
    assert snapshots == ['{"city":', '{"city":"Paris"}']
    call = final.output[0]
    assert call.type == "function_call" and (call.name, call.arguments) == (
        "get_weather",
        '{"city":"Paris"}',
    )


def test_the_sdk_parses_a_whole_response() -> None:
    payload = json.dumps(_body("Hello")).encode()
    response = _serving(payload, "application/json").responses.create(model="bot", input="hi")
    assert response.output_text == "Hello" and response.usage is not None


# The route, with a gateway that replays a script instead of running an engine

TARGET = Target(model="bot", base_model="tiny", max_context=4096, base_source="/nowhere")
PRINCIPAL = Principal(uuid.uuid4(), "lpx_test", uuid.uuid4(), frozenset({"inference"}))


class ScriptedGateway(Gateway):  # a Gateway to the route's typed dependency
    """`prepare`, `run_whole` and `stream` like the real gateway's, over a scripted buffer."""

    def __init__(self, *steps: Step, refusal: InvalidInput | None = None):
        self.steps, self.refusal = steps, refusal
        self.prepared: list[Any] = []

    def _buffer(self) -> StreamBuffer:
        buffer = StreamBuffer(max_bytes=1 << 20)
        for step in self.steps:
            _push(buffer, step)
        _end(buffer, "stop", None)
        return buffer

    async def prepare(
        self,
        tenant_id: Any,
        body: Any,
        limits: Any,
        received_at: Any,
        key_id: Any = None,
        usage_kind: str = "inference",
    ) -> AdmittedRequest:
        if self.refusal is not None:
            raise self.refusal
        self.prepared.append(body)
        return AdmittedRequest(
            tenant_id, TARGET, None, "chat", body.stream, True, 3, request_id="abc123"
        )  # type: ignore[arg-type]

    async def run_whole(self, call: AdmittedRequest) -> tuple[str, Any, StreamBuffer]:
        buffer = self._buffer()
        return "chatcmpl-abc123", buffer.take(), buffer

    async def stream(self, call: AdmittedRequest, encoder_for: Any = None) -> Any:
        engine = asyncio.ensure_future(asyncio.sleep(0))
        events = encode_events(
            encoder_for("chatcmpl-abc123"), self._buffer(), call.include_usage, None
        )
        return until_disconnect(events, engine)


class NoLimits(TenantLimits):
    def __init__(self) -> None:
        pass

    async def get(self, tenant_id: Any) -> Quotas:
        return Quotas()


@pytest.fixture
def route() -> Iterator[tuple[TestClient, ScriptedGateway]]:
    gateway = ScriptedGateway("Hel", "lo")
    app = Litestar(
        route_handlers=[ResponsesController],
        dependencies={
            "principal": Provide(lambda: PRINCIPAL, sync_to_thread=False),
            "gateway": Provide(lambda: gateway, sync_to_thread=False),
            "tenant_limits": Provide(NoLimits, sync_to_thread=False),
        },
        exception_handlers=exception_handlers(),
    )
    with TestClient(app) as client:
        yield client, gateway


def _through(client: TestClient) -> OpenAI:
    """The SDK, its requests answered by the route under test."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        answer = client.post(
            request.url.path, content=request.content, headers={"content-type": "application/json"}
        )
        headers = {
            k: v for k, v in answer.headers.items() if k in ("content-type", "cache-control")
        }
        return httpx2.Response(answer.status_code, content=answer.content, headers=headers)

    return _sdk(handler)


def test_the_route_answers_a_response_object(route: tuple[TestClient, ScriptedGateway]) -> None:
    client, gateway = route
    answer = client.post(
        "/v1/responses", json={"model": "bot", "input": "hi", "instructions": "Be kind."}
    )
    assert answer.status_code == 200
    response = Response.model_validate(answer.json())
    assert (
        response.id == "resp_abc123" and response.output_text == "Hello" and response.model == "bot"
    )
    assert gateway.prepared[0].messages[0] == {"role": "system", "content": "Be kind."}


def test_the_route_streams_typed_events(route: tuple[TestClient, ScriptedGateway]) -> None:
    client, gateway = route
    answer = client.post("/v1/responses", json={"model": "bot", "input": "hi", "stream": True})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(
        "text/event-stream"
    )
    assert answer.headers["cache-control"] == "no-cache"
    events = _parsed([chunk + b"\n\n" for chunk in answer.content.split(b"\n\n") if chunk])
    assert (
        events[-1]["type"] == "response.completed" and events[-1]["response"]["id"] == "resp_abc123"
    )
    assert gateway.prepared[0].stream_options.include_usage


def test_the_route_refuses_in_openais_error_shape(
    route: tuple[TestClient, ScriptedGateway],
) -> None:
    client, gateway = route
    answer = client.post(
        "/v1/responses", json={"model": "bot", "input": "hi", "previous_response_id": "resp_1"}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "previous_response_id" and "stateless" in error["message"]
    assert (
        client.post("/v1/responses", content=b"{oops").json()["error"]["type"]
        == "invalid_request_error"
    )
    assert gateway.prepared == []  # nothing reached the gateway


def test_the_gateways_refusals_name_responses_parameters(
    route: tuple[TestClient, ScriptedGateway],
) -> None:
    client, gateway = route
    gateway.refusal = InvalidInput(
        "max_tokens is 900; the plan allows at most 512 per request", param="max_tokens"
    )
    error = client.post(
        "/v1/responses", json={"model": "bot", "input": "hi", "max_output_tokens": 900}
    ).json()["error"]
    assert error["param"] == "max_output_tokens" and error["message"].startswith(
        "max_output_tokens is 900"
    )


def test_the_sdk_works_through_the_route(route: tuple[TestClient, ScriptedGateway]) -> None:
    client, _ = route
    sdk = _through(client)
    assert sdk.responses.create(model="bot", input="hi").output_text == "Hello"
    with sdk.responses.stream(model="bot", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        assert stream.get_final_response().output_text == "Hello" == "".join(deltas)
    with pytest.raises(BadRequestError) as caught:
        sdk.responses.create(model="bot", input="hi", previous_response_id="resp_1")
    assert caught.value.param == "previous_response_id"


class Point(pydantic.BaseModel):
    x: int
    y: int


def test_the_sdk_parse_helper_works_through_the_route(
    route: tuple[TestClient, ScriptedGateway],
) -> None:
    client, gateway = route
    gateway.steps = ('{"x": 1, ', '"y": 2}')
    parsed = _through(client).responses.parse(model="bot", input="a point", text_format=Point)
    assert parsed.output_parsed == Point(x=1, y=2)
    fmt = gateway.prepared[0].response_format
    assert fmt.type == "json_schema" and fmt.json_schema.name == "Point" and fmt.json_schema.strict


def test_a_responses_output_is_accepted_back_as_the_next_input(
    route: tuple[TestClient, ScriptedGateway],
) -> None:
    client, gateway = route
    sdk = _through(client)
    gateway.steps = (
        "Let me look.",
        {
            "tool_calls": [
                _call(0, arguments='{"city":"Paris"}', call_id="call_x", name="get_weather")
            ]
        },
    )
    first = sdk.responses.create(
        model="bot", input="Weather in Paris?", tools=[{**WEATHER, "strict": None}]
    )
    assert [item.type for item in first.output] == ["message", "function_call"]
    gateway.steps = ("It is 22 C.",)
    turn = [
        {"role": "user", "content": "Weather in Paris?"},
        *first.output,
        {"type": "function_call_output", "call_id": "call_x", "output": "22 C"},
    ]
    second = sdk.responses.create(model="bot", input=turn, tools=[{**WEATHER, "strict": None}])  # type: ignore[arg-type]
    assert second.output_text == "It is 22 C."
    assistant, tool = gateway.prepared[1].messages[1:]
    assert assistant["content"] == "Let me look." and assistant["tool_calls"][0]["id"] == "call_x"
    assert tool == {"role": "tool", "content": "22 C", "tool_call_id": "call_x"}
