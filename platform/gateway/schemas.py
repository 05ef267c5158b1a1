"""OpenAI request bodies for /v1/chat/completions and /v1/completions, validated up front.

Everything the engine would refuse (or silently mis-handle) is refused here with an OpenAI
error naming the parameter, so a bad request never reaches an engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from loraplex.errors import InvalidInput
from loraplex.gateway.body_limits import decode_json
from loraplex.gateway.options import (
    MAX_LOGPROBS_COMPLETIONS,
    MAX_TOP_LOGPROBS_CHAT,
    Metadata,
    NamedToolChoice,
    ResponseFormat,
    Tool,
    chat_schemas,
    checked_tools,
)
from loraplex.gateway.schema_limits import check_request_schemas
from loraplex.serving.engines import GenerateOptions

Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
# Token counts past 2**31 are no count any model has; the bound keeps 4,300-digit integers
# out of messages and engine requests.
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]  # OpenAI's: a 64-bit integer
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_STOP = 4
MAX_CHOICES = 128  # OpenAI's limit for `n`; plans may allow fewer
MAX_STOP_CHARS = 256  # engines re-check a tail this long after every token
MAX_MESSAGES = 2048  # OpenAI's limit for `messages`
MAX_CONTENT_PARTS = 256  # text parts of one message (clients send one to a few)
MAX_TOOL_CALLS = 128  # calls in one assistant turn
MAX_LOGIT_BIAS = 300  # OpenAI's limit for `logit_bias` entries
StopSequence = Annotated[str, msgspec.Meta(max_length=MAX_STOP_CHARS)]


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    """`stream_options`: OpenAI's include_usage, plus our opt-in resumable streams."""

    include_usage: bool = False
    resumable: bool = False  # Loraplex extension: resume with Last-Event-ID for a short window


class _Common(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Fields chat and completions share."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHOICES)] = 1
    stop: StopSequence | list[StopSequence] | None = None
    seed: Seed | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: Annotated[dict[str, float], msgspec.Meta(max_length=MAX_LOGIT_BIAS)] | None = None
    response_format: ResponseFormat | None = None
    # Accepted for compatibility; Loraplex stores no completions (docs/openai.md).
    metadata: Metadata | None = None
    store: bool | None = None

    def stop_list(self) -> list[str] | None:
        """`stop` as a list, checked against OpenAI's limit of four sequences."""
        if self.stop is None:
            return None
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        if len(stops) > MAX_STOP or any(not s for s in stops):
            raise InvalidInput(f"stop takes up to {MAX_STOP} non-empty strings", param="stop")
        return stops

    def check_common(self) -> None:
        """Checks msgspec's field constraints cannot express."""
        if self.n > 1 and self.temperature == 0:
            # vLLM refuses it too: greedy decoding makes every choice the same text.
            raise InvalidInput(
                "n > 1 samples several answers; with temperature 0 they would all be the "
                "same: set temperature above 0 (and a seed for repeatable choices)",
                param="n",
            )
        if self.stream_options is not None and not self.stream:
            raise InvalidInput(
                "stream_options is only allowed with stream=true", param="stream_options"
            )
        self.stop_list()

    def base_options(self) -> dict[str, Any]:
        """The `GenerateOptions` fields chat and completions share, as sent."""
        return {
            "n": self.n,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "logit_bias": self.logit_bias,
            "response_format": self.response_format.checked() if self.response_format else None,
        }


class ChatCompletionRequest(_Common, kw_only=True):
    """POST /v1/chat/completions."""

    messages: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_MESSAGES)]
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    def validated_messages(self) -> list[dict[str, Any]]:
        """Messages reduced to what the engine needs, or a 400 naming the bad message."""
        if not self.messages:
            raise InvalidInput("messages must not be empty", param="messages")
        return [_message(i, m) for i, m in enumerate(self.messages)]

    def token_limit(self) -> int | None:
        """`max_completion_tokens` (the newer name) or `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens

    def options(self, max_top_logprobs: int = MAX_TOP_LOGPROBS_CHAT) -> GenerateOptions | None:
        """The output-shaping options, checked; None when the request uses none of them."""
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise InvalidInput("top_logprobs needs logprobs=true", param="top_logprobs")
            if self.top_logprobs > max_top_logprobs:
                raise InvalidInput(
                    f"top_logprobs is {self.top_logprobs}; at most {max_top_logprobs} is allowed",
                    param="top_logprobs",
                )
        check_request_schemas(chat_schemas(self.response_format, self.tools))
        tools, tool_choice = checked_tools(self.tools, self.tool_choice)
        if self.parallel_tool_calls is not None and not tools:
            raise InvalidInput(
                "parallel_tool_calls is only allowed when tools are given",
                param="parallel_tool_calls",
            )
        options = GenerateOptions(
            **self.base_options(),
            logprobs=self.logprobs,
            top_logprobs=self.top_logprobs,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
        )
        return None if options == PLAIN else options


class CompletionRequest(_Common, kw_only=True):
    """POST /v1/completions."""

    prompt: str | list[str]
    logprobs: Annotated[int, msgspec.Meta(ge=0)] | None = None

    def options(self, max_top_logprobs: int = MAX_LOGPROBS_COMPLETIONS) -> GenerateOptions | None:
        """The output-shaping options, checked; None when the request uses none of them."""
        limit = min(max_top_logprobs, MAX_LOGPROBS_COMPLETIONS)
        if self.logprobs is not None and self.logprobs > limit:
            raise InvalidInput(
                f"logprobs is {self.logprobs}; at most {limit} is allowed", param="logprobs"
            )
        options = GenerateOptions(
            **self.base_options(),
            logprobs=self.logprobs is not None,
            top_logprobs=self.logprobs,
        )
        return None if options == PLAIN else options

    def single_prompt(self) -> str:
        """The one prompt string (a batch of prompts is not supported)."""
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1:
                raise InvalidInput("send one prompt per request", param="prompt")
            return self.prompt[0]
        return self.prompt

    def token_limit(self) -> int | None:
        """`max_tokens` (completions default to 16 at OpenAI)."""
        return self.max_tokens or 16


def _message(index: int, message: dict[str, Any]) -> dict[str, Any]:
    param = f"messages[{index}]"
    role = message.get("role")
    if role not in ROLES:
        raise InvalidInput(f"{param}.role must be one of {sorted(ROLES)}", param=f"{param}.role")
    content = message.get("content")
    calls = message.get("tool_calls") if role == "assistant" else None
    if isinstance(content, list):
        if len(content) > MAX_CONTENT_PARTS:
            raise InvalidInput(
                f"{param}.content has {len(content)} parts; at most {MAX_CONTENT_PARTS}",
                param=f"{param}.content",
            )
        content = "".join(_text_part(param, part) for part in content)
    if content is None and calls:
        content = ""  # an assistant turn that only called tools
    if not isinstance(content, str):
        raise InvalidInput(
            f"{param}.content must be a string or a list of text parts", param=f"{param}.content"
        )
    checked: dict[str, Any] = {
        "role": "system" if role == "developer" else role,
        "content": content,
    }
    if calls is not None:
        checked["tool_calls"] = _tool_calls(param, calls)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(
                f"{param}.tool_call_id must name the tool call this answers",
                param=f"{param}.tool_call_id",
            )
        checked["tool_call_id"] = call_id
    return checked


def _tool_calls(param: str, calls: Any) -> list[dict[str, Any]]:
    """An assistant turn's `tool_calls`, each a function with a name and JSON arguments."""
    if not isinstance(calls, list):
        raise InvalidInput(f"{param}.tool_calls must be a list", param=f"{param}.tool_calls")
    if len(calls) > MAX_TOOL_CALLS:
        raise InvalidInput(
            f"{param}.tool_calls has {len(calls)} calls; at most {MAX_TOOL_CALLS}",
            param=f"{param}.tool_calls",
        )
    checked = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise InvalidInput(
                f"{param}.tool_calls[{i}] must be a function call with a name and arguments",
                param=f"{param}.tool_calls[{i}]",
            )
        checked.append(
            {
                "id": str(call.get("id") or f"call_{i}"),
                "type": "function",
                "function": {"name": function["name"], "arguments": function["arguments"]},
            }
        )
    return checked


def _text_part(param: str, part: Any) -> str:
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    raise InvalidInput(f"{param}.content: only text parts are supported", param=f"{param}.content")


PLAIN = GenerateOptions()  # a request that shapes nothing: the plain text fast path

Kind = Literal["chat", "completion"]


def decode_body(raw: bytes, kind: Kind) -> ChatCompletionRequest | CompletionRequest:
    """Decode and validate a JSON body; every failure is an OpenAI-shaped 400."""
    schema: type[ChatCompletionRequest] | type[CompletionRequest] = (
        ChatCompletionRequest if kind == "chat" else CompletionRequest
    )
    request = decode_json(raw, schema, _param_of)
    request.check_common()
    return request


def _param_of(message: str) -> str | None:
    marker = "at `$."
    if marker in message:
        return message.split(marker, 1)[1].split("`", 1)[0]
    if "Object contains unknown field `" in message:
        return message.split("unknown field `", 1)[1].split("`", 1)[0]
    return None
