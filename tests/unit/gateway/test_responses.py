"""The Responses API request: every input shape as a chat request, every refusal a 400."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from loraplex.control.quotas import Quotas
from loraplex.errors import InvalidInput
from loraplex.gateway.options import NamedToolChoice
from loraplex.gateway.pump import StreamLimits
from loraplex.gateway.resolve import Target
from loraplex.gateway.responses_schema import (
    ResponsesRequest,
    decode_request,
    in_responses_terms,
    to_chat,
)
from loraplex.gateway.schemas import ChatCompletionRequest
from loraplex.gateway.service import Gateway

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
CALL_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "22 C"}


def _request(**fields: Any) -> ResponsesRequest:
    return decode_request(json.dumps({"model": "bot", "input": "hi", **fields}).encode())


def _chat(**fields: Any) -> ChatCompletionRequest:
    return to_chat(_request(**fields))


def _refused(**fields: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        _chat(**fields)
    assert caught.value.status_code == 400
    return caught.value


# Translation: every input shape


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    chat = _chat(input="What is LoRA?", instructions="Answer briefly.")
    assert chat.messages == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is LoRA?"},
    ]
    assert chat.validated_messages() == chat.messages and chat.model == "bot"


def test_easy_messages_keep_their_roles_and_join_text_parts() -> None:
    chat = _chat(
        input=[
            {"role": "developer", "content": "Be terse."},
            {"role": "system", "content": [{"type": "input_text", "text": "Sys."}]},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {"role": "assistant", "content": "earlier answer"},
        ]
    )
    assert chat.messages == [
        {"role": "developer", "content": "Be terse."},
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "earlier answer"},
    ]
    assert chat.validated_messages()[0]["role"] == "system"  # chat's own developer rule


def test_typed_message_items_and_assistant_output_text_parts() -> None:
    chat = _chat(
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "a", "annotations": [], "logprobs": []}
                ],
            },
        ]
    )
    assert chat.messages == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


def test_function_calls_become_one_assistant_turn_and_outputs_tool_turns() -> None:
    second = {**CALL, "call_id": "call_2", "arguments": '{"city": "Oslo"}'}
    chat = _chat(
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {"role": "assistant", "content": "Let me look."},
            CALL,
            second,
            CALL_OUTPUT,
            {**CALL_OUTPUT, "call_id": "call_2", "output": [{"type": "input_text", "text": "3 C"}]},
        ],
    )
    assistant, first_output, second_output = chat.messages[1:]
    assert assistant == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            },
        ],
    }
    assert first_output == {"role": "tool", "content": "22 C", "tool_call_id": "call_1"}
    assert second_output == {"role": "tool", "content": "3 C", "tool_call_id": "call_2"}
    assert chat.validated_messages()[1]["tool_calls"] == assistant["tool_calls"]


def test_a_call_after_a_tool_turn_starts_a_new_assistant_turn() -> None:
    again = {**CALL, "call_id": "call_2"}
    chat = _chat(input=[{"role": "user", "content": "q"}, CALL, CALL_OUTPUT, again])
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "tool", "assistant"]
    assert chat.messages[3] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [chat.messages[3]["tool_calls"][0]],
    }


def test_function_tools_are_nested_for_chat_and_tool_choice_translated() -> None:
    chat = _chat(
        tools=[{**WEATHER, "strict": True}],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    assert chat.tools is not None and len(chat.tools) == 1
    function = chat.tools[0].function
    assert (function.name, function.description, function.strict) == (
        "get_weather",
        "The weather in a city",
        True,
    )
    assert function.parameters == WEATHER["parameters"]
    assert (
        isinstance(chat.tool_choice, NamedToolChoice)
        and chat.tool_choice.function.name == "get_weather"
    )
    assert chat.parallel_tool_calls is False
    options = chat.options()
    assert options is not None and options.tool_choice == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


@pytest.mark.parametrize("choice", ["none", "auto", "required"])
def test_tool_choice_modes_pass_through(choice: str) -> None:
    assert _chat(tools=[WEATHER], tool_choice=choice).tool_choice == choice


def test_tool_fields_without_tools_that_mean_nothing_are_dropped() -> None:
    chat = _chat(tool_choice="auto", parallel_tool_calls=True)
    assert (chat.tools, chat.tool_choice, chat.parallel_tool_calls) == (None, None, None)
    assert _chat(tool_choice="none").tool_choice is None


def test_text_formats_become_response_formats() -> None:
    assert _chat(text={"format": {"type": "text"}}).response_format is None
    assert _chat(text={"verbosity": "medium"}).response_format is None
    fmt = _chat(text={"format": {"type": "json_object"}}).response_format
    assert fmt is not None and fmt.checked() == {"type": "json_object"}
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    fmt = _chat(
        text={
            "format": {
                "type": "json_schema",
                "name": "point",
                "schema": schema,
                "strict": True,
                "description": "A point",
            }
        }
    ).response_format
    assert fmt is not None and fmt.checked() == {
        "type": "json_schema",
        "json_schema": {
            "name": "point",
            "description": "A point",
            "schema": schema,
            "strict": True,
        },
    }


def test_streams_always_ask_for_usage() -> None:
    streamed = _chat(stream=True)
    assert streamed.stream and streamed.stream_options is not None
    assert streamed.stream_options.include_usage and not streamed.stream_options.resumable
    assert _chat().stream_options is None and not _chat().stream


def test_sampling_and_length_fields_carry_over() -> None:
    chat = _chat(
        max_output_tokens=40, temperature=0, top_p=0.5, user="u1", metadata={"k": "v"}, store=False
    )
    assert (chat.token_limit(), chat.temperature, chat.top_p, chat.user) == (40, 0, 0.5, "u1")
    assert (chat.metadata, chat.store, chat.n) == ({"k": "v"}, False, 1)
    assert _chat(safety_identifier="hashed").user == "hashed"  # routes like `user`


def test_logprobs_are_asked_by_include_or_top_logprobs() -> None:
    assert not _chat().logprobs
    assert _chat(include=["message.output_text.logprobs"]).logprobs
    chat = _chat(top_logprobs=3)
    assert chat.logprobs and chat.top_logprobs == 3
    no_ops = ["reasoning.encrypted_content", "file_search_call.results"]
    assert not _chat(include=no_ops).logprobs


def test_compatibility_fields_are_accepted() -> None:
    chat = _chat(
        store=True,
        truncation="disabled",
        background=False,
        previous_response_id=None,
        prompt_cache_key="k",
        stream=True,
        stream_options={"include_obfuscation": False},
    )
    assert chat.stream


# Refusals: the stateless fields


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"conversation": "conv_123"}, "conversation"),
        ({"conversation": {"id": "conv_123"}}, "conversation"),
        ({"prompt": {"id": "pmpt_123"}}, "prompt"),
        ({"background": True}, "background"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ],
)
def test_stateful_fields_are_refused_saying_what_to_send(fields: dict, param: str) -> None:
    error = _refused(**fields)
    assert error.param == param
    assert "stateless" in error.detail and "`input`" in error.detail


def test_truncation_auto_is_refused() -> None:
    error = _refused(truncation="auto")
    assert error.param == "truncation" and "never drops" in error.detail


# Refusals: bad input items


@pytest.mark.parametrize(
    ("input_", "param"),
    [
        ([], "input"),
        ([{"role": "robot", "content": "x"}], "input[0].role"),
        ([{"role": "user", "content": 5}], "input[0].content"),
        ([{"role": "user", "content": None}], "input[0].content"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]},
            ],
            "input[1].content[0].type",
        ),
        (
            [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
            "input[0].content[0].type",
        ),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": 3}]}],
            "input[0].content[0].text",
        ),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": "x", "foo": 1}]}],
            "input[0].content[0].foo",
        ),
        ([{"role": "user", "content": "x", "name": "bob"}], "input[0].name"),
        ([{"type": "message", "content": "x"}], "input[0].role"),
        ([{**CALL, "call_id": ""}], "input[0].call_id"),
        ([{k: v for k, v in CALL.items() if k != "name"}], "input[0].name"),
        ([{**CALL, "arguments": {"city": "Paris"}}], "input[0].arguments"),
        ([{**CALL, "namespace": "x"}], "input[0].namespace"),
        ([CALL_OUTPUT], "input[0].call_id"),
        ([CALL, {**CALL_OUTPUT, "call_id": "call_9"}], "input[1].call_id"),
        ([CALL, {**CALL_OUTPUT, "output": 22}], "input[1].output"),
        (
            [CALL, {**CALL_OUTPUT, "output": [{"type": "input_file", "file_id": "f"}]}],
            "input[1].output[0].type",
        ),
        ([{"type": "reasoning", "summary": []}], "input[0].type"),
        ([{"type": "web_search_call", "id": "ws_1"}], "input[0].type"),
        ([{"content": "no role, no type"}], "input[0].type"),
    ],
)
def test_bad_input_items_name_their_path(input_: list, param: str) -> None:
    assert _refused(input=input_).param == param


# Refusals: text formats, tools, tool_choice, include


def test_a_bad_text_format_type_names_the_type() -> None:
    with pytest.raises(InvalidInput) as caught:
        _request(text={"format": {"type": "yaml"}})
    assert caught.value.param == "text.format.type"


def test_a_json_schema_format_needs_a_name() -> None:
    with pytest.raises(InvalidInput) as caught:
        _request(text={"format": {"type": "json_schema", "schema": {}}})
    assert caught.value.param == "text.format" and "name" in caught.value.detail


def test_a_json_schema_format_nested_like_chat_is_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        _request(
            text={"format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}}
        )
    assert caught.value.param == "text.format.json_schema"


def test_a_json_schema_format_name_must_be_openais() -> None:
    error = _refused(text={"format": {"type": "json_schema", "name": "a b", "schema": {}}})
    assert error.param == "text.format.name"


def test_a_json_schema_format_must_be_a_valid_schema() -> None:
    error = _refused(
        text={"format": {"type": "json_schema", "name": "a", "schema": {"type": "no-such-type"}}}
    )
    assert error.param == "text.format.schema" and "not a valid JSON Schema" in error.detail


def test_only_the_default_verbosity_is_accepted() -> None:
    assert _refused(text={"verbosity": "low"}).param == "text.verbosity"


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "web_search"}], "tools[0].type"),
        ([{"type": "function", "function": {"name": "chat_shaped"}}], "tools[0].function"),
        ([{"type": "function"}], "tools[0]"),
        ([{**WEATHER, "name": 5}], "tools[0].name"),
        ([{**WEATHER, "name": "bad name!"}], "tools[0].name"),
        ([{**WEATHER, "parameters": {"type": 12}}], "tools[0].parameters"),
        ([WEATHER, WEATHER], "tools[1].name"),
        ([WEATHER, {**WEATHER, "name": "x", "defer_loading": True}], "tools[1].defer_loading"),
        ([{**WEATHER, "name": f"f{i}"} for i in range(129)], "tools"),
    ],
)
def test_bad_tools_name_their_path(tools: list, param: str) -> None:
    assert _refused(tools=tools).param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice.name",
        ),
        ({"tools": [WEATHER], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        (
            {
                "tools": [WEATHER],
                "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []},
            },
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice"),
    ],
)
def test_bad_tool_choices_are_refused(fields: dict, param: str) -> None:
    assert _refused(**fields).param == param


def test_an_unknown_include_is_refused() -> None:
    assert _refused(include=["message.output_text.logprobs", "everything"]).param == "include[1]"


# Refusals: the body itself


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "bot", "input": "hi", "reasoning": {"effort": "low"}}, "reasoning"),
        ({"model": "bot", "input": "hi", "temperature": 3}, "temperature"),
        ({"model": "bot", "input": "hi", "top_logprobs": 21}, "top_logprobs"),
        ({"model": "bot", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "bot", "input": 7}, "input"),
        ({"model": "bot", "input": ["not an item"]}, "input[0]"),
        ({"model": "", "input": "hi"}, "model"),
        (
            {"model": "bot", "input": "hi", "stream_options": {"include_obfuscation": False}},
            "stream_options",
        ),
        (
            {
                "model": "bot",
                "input": "hi",
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            "stream_options.include_usage",
        ),
    ],
)
def test_malformed_bodies_name_the_parameter(body: dict, param: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_request(json.dumps(body).encode())
    assert caught.value.param == param


@pytest.mark.parametrize("raw", [b"{not json", b'{"model": "\xff"}', b'{"model": "bot"}'])
def test_undecodable_bodies_are_400s(raw: bytes) -> None:
    with pytest.raises(InvalidInput):
        decode_request(raw)


def test_chat_side_refusals_are_told_in_responses_terms() -> None:
    plan = InvalidInput(
        "max_tokens is 900; the plan allows at most 512 per request", param="max_tokens"
    )
    error = in_responses_terms(plan)
    assert error.param == "max_output_tokens" and error.detail.startswith(
        "max_output_tokens is 900"
    )
    context = in_responses_terms(InvalidInput("the prompt is too long", param="messages"))
    assert context.param == "input"
    model = in_responses_terms(InvalidInput("no such model", param="model"))
    assert (model.param, model.detail) == ("model", "no such model")


# The gateway runs the translation like any chat request

TARGET = Target(model="bot", base_model="tiny", max_context=4096, base_source="/nowhere")


class OneTarget:
    async def resolve(self, tenant_id: Any, model: str) -> Any:
        return SimpleNamespace(pick=lambda user: TARGET)


class OpenGate:
    async def admit(self, *args: Any, **kwargs: Any) -> None:
        return None


async def test_the_gateway_prepares_a_translated_request() -> None:
    gateway = Gateway(OneTarget(), None, None, StreamLimits(), gate=OpenGate())  # type: ignore[arg-type]
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    chat = _chat(
        instructions="Be terse.",
        tools=[WEATHER],
        tool_choice="required",
        text={"format": {"type": "json_schema", "name": "point", "schema": schema}},
        top_logprobs=2,
        max_output_tokens=9,
        stream=True,
    )
    call = await gateway.prepare(uuid.uuid4(), chat, Quotas())
    assert call.stream and call.include_usage and call.kind == "chat"
    request = call.request
    assert request.max_tokens == 9 and request.messages == chat.messages
    options = request.options
    assert options is not None and options.tool_choice == "required"
    assert options.tools is not None and options.tools[0]["function"]["name"] == "get_weather"
    assert options.response_format is not None and options.response_format["type"] == "json_schema"
    assert (options.logprobs, options.top_logprobs) == (True, 2)
