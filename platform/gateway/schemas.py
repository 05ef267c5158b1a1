"""OpenAI request bodies for /v1/chat/completions and /v1/completions, validated up front.

Everything the engine would refuse (or silently mis-handle) is refused here with an OpenAI
error naming the parameter, so a bad request never reaches an engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from loraplex.errors import InvalidInput

Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
MaxTokens = Annotated[int, msgspec.Meta(ge=1)]
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_STOP = 4


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
    n: Annotated[int, msgspec.Meta(ge=1)] = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None

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
        if self.n != 1:
            raise InvalidInput("only n=1 is supported", param="n")
        if self.stream_options is not None and not self.stream:
            raise InvalidInput(
                "stream_options is only allowed with stream=true", param="stream_options"
            )
        self.stop_list()


class ChatCompletionRequest(_Common, kw_only=True):
    """POST /v1/chat/completions."""

    messages: list[dict[str, Any]]
    max_completion_tokens: MaxTokens | None = None

    def validated_messages(self) -> list[dict[str, Any]]:
        """Messages reduced to role + text content, or a 400 naming the bad message."""
        if not self.messages:
            raise InvalidInput("messages must not be empty", param="messages")
        return [_message(i, m) for i, m in enumerate(self.messages)]

    def token_limit(self) -> int | None:
        """`max_completion_tokens` (the newer name) or `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Common, kw_only=True):
    """POST /v1/completions."""

    prompt: str | list[str]

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
    if isinstance(content, list):
        content = "".join(_text_part(param, part) for part in content)
    if not isinstance(content, str):
        raise InvalidInput(
            f"{param}.content must be a string or a list of text parts", param=f"{param}.content"
        )
    return {"role": "system" if role == "developer" else role, "content": content}


def _text_part(param: str, part: Any) -> str:
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    raise InvalidInput(f"{param}.content: only text parts are supported", param=f"{param}.content")


Kind = Literal["chat", "completion"]


def decode_body(raw: bytes, kind: Kind) -> ChatCompletionRequest | CompletionRequest:
    """Decode and validate a JSON body; every failure is an OpenAI-shaped 400."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"request body is not valid UTF-8 (byte {exc.start})") from exc
    schema: type[ChatCompletionRequest] | type[CompletionRequest] = (
        ChatCompletionRequest if kind == "chat" else CompletionRequest
    )
    try:
        request = msgspec.json.decode(raw, type=schema)
    except msgspec.ValidationError as exc:
        raise InvalidInput(str(exc), param=_param_of(str(exc))) from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc
    request.check_common()
    return request


def _param_of(message: str) -> str | None:
    marker = "at `$."
    if marker in message:
        return message.split(marker, 1)[1].split("`", 1)[0]
    if "Object contains unknown field `" in message:
        return message.split("unknown field `", 1)[1].split("`", 1)[0]
    return None
