"""OpenAI's Responses API request (`POST /v1/responses`), stateless, as a chat request.

Loraplex keeps no responses: a request carries its whole conversation in `input`. The fields
that refer to stored state (`previous_response_id`, `conversation`, stored `prompt`
templates, `background` runs, `item_reference` items) are refused with a 400 saying so.
Everything else is checked here in the Responses API's own terms, each refusal naming its
parameter (`input[2].content`, `tools[0].name`), then translated into the
`ChatCompletionRequest` the gateway runs like any chat completion (`input`'s items are
translated in `responses_input`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from loraplex.errors import InvalidInput
from loraplex.gateway.body_limits import decode_json
from loraplex.gateway.options import (
    MAX_TOOLS,
    MAX_TOP_LOGPROBS_CHAT,
    FunctionSpec,
    JsonSchemaFormat,
    Metadata,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    Tool,
    check_json_schema,
    check_name,
)
from loraplex.gateway.responses_input import STATELESS, input_messages
from loraplex.gateway.schema_limits import check_request_schemas
from loraplex.gateway.schemas import (
    MAX_MESSAGES,
    ChatCompletionRequest,
    MaxTokens,
    StreamOptions,
    Temperature,
    TopP,
)

LOGPROBS = "message.output_text.logprobs"
# What `include` may name. Only logprobs changes anything: the other values enrich items
# (hosted tool calls, images, reasoning) that Loraplex never produces, so they are no-ops.
INCLUDABLE = frozenset(
    {
        LOGPROBS,
        "reasoning.encrypted_content",
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
    }
)
T = TypeVar("T")


class PlainText(msgspec.Struct, tag="text", tag_field="type", forbid_unknown_fields=True):
    """`text.format` of type text: no constraint."""


class JsonObjectText(
    msgspec.Struct, tag="json_object", tag_field="type", forbid_unknown_fields=True
):
    """`text.format` of type json_object: any JSON object."""


class JsonSchemaText(
    msgspec.Struct, tag="json_schema", tag_field="type", forbid_unknown_fields=True, kw_only=True
):
    """`text.format` of type json_schema: JSON matching `schema` (flat, unlike chat's)."""

    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


TextFormat = PlainText | JsonObjectText | JsonSchemaText


class TextConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`text`: the output's format, and a verbosity hint."""

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class FunctionTool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of `tools`: a function, flat (chat nests it under `function`)."""

    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponsesStreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    """`stream_options`: Loraplex pads no events, so obfuscation is off whatever is asked."""

    include_obfuscation: bool | None = None


class ResponsesRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/responses, without the stored state it does not support."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    input: str | Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_MESSAGES)]
    instructions: str | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    text: TextConfig | None = None
    tools: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP_LOGPROBS_CHAT)] | None = None
    include: Annotated[list[str], msgspec.Meta(max_length=len(INCLUDABLE))] | None = None
    stream: bool = False
    stream_options: ResponsesStreamOptions | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    safety_identifier: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    prompt_cache_key: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    # Accepted for compatibility; Loraplex stores nothing whatever `store` says.
    metadata: Metadata | None = None
    store: bool | None = None
    # Stored state: declared only to refuse them with a useful message (`check_stateless`).
    previous_response_id: str | None = None
    conversation: Any = None
    prompt: Any = None
    background: bool | None = None

    def function_tools(self) -> list[FunctionTool]:
        """`tools`, each checked: only functions, valid names and parameter schemas."""
        if self.tools is not None and len(self.tools) > MAX_TOOLS:
            raise InvalidInput(f"tools takes at most {MAX_TOOLS} functions", param="tools")
        tools: list[FunctionTool] = []
        for i, raw in enumerate(self.tools or []):
            param = f"tools[{i}]"
            kind = raw.get("type")
            if kind != "function":
                raise InvalidInput(
                    f"{param}.type is {kind!r}: only function tools are supported "
                    "(Loraplex has no hosted tools)",
                    param=f"{param}.type",
                )
            tool = _convert(raw, FunctionTool, param)
            check_name(tool.name, f"{param}.name")
            if tool.parameters is not None:
                check_json_schema(tool.parameters, f"{param}.parameters")
            if any(t.name == tool.name for t in tools):
                raise InvalidInput(
                    f"{param}.name {tool.name!r} is given twice", param=f"{param}.name"
                )
            tools.append(tool)
        return tools

    def text_format(self) -> TextFormat:
        """`text.format`, checked (plain text when absent)."""
        fmt = self.text.format if self.text is not None else None
        verbosity = self.text.verbosity if self.text is not None else None
        if verbosity not in (None, "medium"):
            # Like OpenAI's models without the hint: only the default is accepted.
            raise InvalidInput(
                f"text.verbosity {verbosity!r} is not supported: Loraplex's models have no "
                "verbosity control; leave it out or use 'medium'",
                param="text.verbosity",
            )
        if isinstance(fmt, JsonSchemaText):
            check_name(fmt.name, "text.format.name")
            check_json_schema(fmt.schema, "text.format.schema")
        return fmt or PlainText()


def check_stateless(request: ResponsesRequest) -> None:
    """Refuse every field that needs stored state, naming what to send instead."""
    stored = {
        "previous_response_id": (request.previous_response_id is not None, "a previous response"),
        "conversation": (request.conversation is not None, "a stored conversation"),
        "prompt": (request.prompt is not None, "a stored prompt template"),
        "background": (bool(request.background), "a background response to poll later"),
    }
    for param, (given, what) in stored.items():
        if given:
            raise InvalidInput(STATELESS.format(what=f"`{param}` ({what})"), param=param)
    if request.truncation == "auto":
        raise InvalidInput(
            "truncation 'auto' is not supported: Loraplex never drops input items; send input "
            "that fits the model's context (truncation 'disabled', the default)",
            param="truncation",
        )


def to_chat(request: ResponsesRequest) -> ChatCompletionRequest:
    """The chat completion that runs `request`; every refusal is a 400 naming its parameter."""
    check_stateless(request)
    check_request_schemas(_schemas(request))
    messages = input_messages(request.input)
    if request.instructions is not None:
        messages.insert(0, {"role": "system", "content": request.instructions})
    tools = request.function_tools()
    logprobs = _logprobs_asked(request)
    return ChatCompletionRequest(
        model=request.model,
        messages=messages,
        max_completion_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        stream=request.stream,
        # A Response always ends with its usage; chat streams send it only when asked.
        stream_options=StreamOptions(include_usage=True) if request.stream else None,
        user=request.user or request.safety_identifier,
        response_format=_response_format(request.text_format()),
        metadata=request.metadata,
        store=request.store,
        logprobs=logprobs,
        top_logprobs=request.top_logprobs if logprobs else None,
        tools=[_chat_tool(tool) for tool in tools] or None,
        tool_choice=_tool_choice(request.tool_choice, tools),
        parallel_tool_calls=request.parallel_tool_calls if tools else None,
    )


def _schemas(request: ResponsesRequest) -> list[tuple[str, Any]]:
    """Each schema the request carries, with its parameter (before any is checked)."""
    fmt = request.text.format if request.text is not None else None
    schemas = [("text.format.schema", fmt.schema if isinstance(fmt, JsonSchemaText) else None)]
    schemas += [
        (f"tools[{i}].parameters", tool.get("parameters"))
        for i, tool in enumerate(request.tools or [])
    ]
    return [(param, schema) for param, schema in schemas if isinstance(schema, dict)]


def _chat_tool(tool: FunctionTool) -> Tool:
    spec = FunctionSpec(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        strict=tool.strict,
    )
    return Tool(type="function", function=spec)


def _tool_choice(
    choice: str | dict[str, Any] | None, tools: list[FunctionTool]
) -> str | NamedToolChoice | None:
    """Responses' `tool_choice` in chat terms; "none"/"auto" without tools mean nothing."""
    if choice is None or (not tools and choice in ("none", "auto")):
        return None
    if not tools:
        raise InvalidInput("tool_choice is only allowed when tools are given", param="tool_choice")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidInput(
                "tool_choice must be 'none', 'auto', 'required' or "
                '{"type": "function", "name": ...}',
                param="tool_choice",
            )
        return choice
    if choice.get("type") != "function" or set(choice) != {"type", "name"}:
        raise InvalidInput(
            f"tool_choice of type {choice.get('type')!r} is not supported: name a function "
            'as {"type": "function", "name": ...}',
            param="tool_choice",
        )
    name = choice["name"]
    if not any(tool.name == name for tool in tools):
        raise InvalidInput(
            f"tool_choice names function {name!r}, which is not in tools", param="tool_choice.name"
        )
    return NamedToolChoice(type="function", function=NamedFunction(name=name))


def _response_format(fmt: TextFormat) -> ResponseFormat | None:
    if isinstance(fmt, PlainText):
        return None
    if isinstance(fmt, JsonObjectText):
        return ResponseFormat(type="json_object")
    spec = JsonSchemaFormat(
        name=fmt.name, description=fmt.description, schema=fmt.schema, strict=fmt.strict
    )
    return ResponseFormat(type="json_schema", json_schema=spec)


def _logprobs_asked(request: ResponsesRequest) -> bool:
    """Logprobs are returned when `include` asks for them or `top_logprobs` is given."""
    for i, name in enumerate(request.include or []):
        if name not in INCLUDABLE:
            raise InvalidInput(
                f"include[{i}] {name!r} is not one of {sorted(INCLUDABLE)}", param=f"include[{i}]"
            )
    return LOGPROBS in (request.include or []) or request.top_logprobs is not None


def _convert(value: Any, kind: type[T], param: str) -> T:
    """`msgspec.convert`, its errors as 400s naming the parameter under `param`."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        where = param + _path_of(str(exc))
        raise InvalidInput(f"{where}: {str(exc).split(' - at ', 1)[0]}", param=where) from None


def _body_param(message: str) -> str | None:
    """The parameter a msgspec error about the whole body names."""
    return _path_of(message).lstrip(".") or None


def _path_of(message: str) -> str:
    """The parameter path in a msgspec error, relative to what was converted."""
    path = message.split(" - at `$", 1)[1].rstrip("`") if " - at `$" in message else ""
    if "unknown field `" in message:
        path += "." + message.split("unknown field `", 1)[1].split("`", 1)[0]
    return path


def decode_request(raw: bytes) -> ResponsesRequest:
    """Decode and validate a JSON body; every failure is an OpenAI-shaped 400."""
    request = decode_json(raw, ResponsesRequest, _body_param)
    if request.stream_options is not None and not request.stream:
        raise InvalidInput(
            "stream_options is only allowed with stream=true", param="stream_options"
        )
    return request


# The gateway checks limits in chat terms; a refusal there is told in Responses terms.
CHAT_PARAMS = {"max_tokens": "max_output_tokens", "messages": "input"}


def in_responses_terms(error: InvalidInput) -> InvalidInput:
    """A chat-side refusal of a translated request, naming the Responses parameter."""
    param = CHAT_PARAMS.get(error.param or "", error.param)
    detail = error.detail.replace("max_tokens", "max_output_tokens")
    return type(error)(detail, param=param, headers=error.headers)
