"""The OpenAI chat/completions wire format both engines speak: request bodies and chunks.

Chunks are decoded into small msgspec structs that name only the fields a driver reads, so
msgspec skips the rest of each chunk without building Python objects for it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loraplex.serving.engines.protocol import EngineRejected, GenerateChunk, GenerateRequest

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None  # chat stream
    message: _Delta | None = None  # chat, not streamed
    text: str | None = None  # completions
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ErrorBody(msgspec.Struct):
    message: str = ""
    code: int | str | None = None


class OpenAIChunk(msgspec.Struct):
    """An OpenAI chunk or response, or an error document sent in its place."""

    choices: list[_Choice] = []
    usage: _Usage | None = None
    object: str = ""
    message: str | None = None  # {"object": "error", "message": ..., "code": 400}
    code: int | str | None = None
    error: _ErrorBody | str | None = None  # {"error": {"message": ..., "code": 400}}

    @property
    def error_message(self) -> str | None:
        """The engine's error message when this document is an error, else None."""
        if self.error is not None:
            return self.error if isinstance(self.error, str) else self.error.message
        if self.object == "error":
            return self.message or "engine error"
        return None

    @property
    def error_status(self) -> int:
        """The HTTP-like status an error document names; 500 when it names none."""
        code = self.error.code if isinstance(self.error, _ErrorBody) else self.code
        return code if isinstance(code, int) else 500


decode_chunk = msgspec.json.Decoder(OpenAIChunk).decode


class ModelCard(msgspec.Struct):
    """One entry of `GET /v1/models`: the base model (no parent) or an adapter."""

    id: str
    root: str | None = None
    parent: str | None = None


class _ModelList(msgspec.Struct):
    data: list[ModelCard] = []


decode_models = msgspec.json.Decoder(_ModelList).decode


def openai_path(request: GenerateRequest) -> str:
    """The route for a request: chat completions for `messages`, completions for `prompt`."""
    return CHAT_PATH if request.is_chat else COMPLETIONS_PATH


def openai_body(request: GenerateRequest, model: str, **stream_options: bool) -> dict[str, Any]:
    """The JSON body for `request`, addressed to `model`; unset sampling values are left out."""
    body: dict[str, Any] = {"model": model}
    if request.is_chat:
        body["messages"] = request.messages
    else:
        body["prompt"] = request.prompt
    for key in ("max_tokens", "temperature", "top_p", "stop", "seed"):
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    body["stream"] = request.stream
    if request.stream and request.include_usage:
        body["stream_options"] = {"include_usage": True, **stream_options}
    return body


def to_chunk(chunk: OpenAIChunk) -> GenerateChunk | None:
    """The protocol chunk for an engine chunk, or None when it carries nothing new.

    The first chat chunk (the assistant role, no text) carries nothing; a usage-only chunk
    (`choices: []`) carries the final counts.
    """
    usage = chunk.usage
    prompt_tokens = usage.prompt_tokens if usage else None
    completion_tokens = usage.completion_tokens if usage else None
    if not chunk.choices:
        if usage is None:
            return None
        return GenerateChunk("", None, prompt_tokens, completion_tokens)
    choice = chunk.choices[0]
    part = choice.delta or choice.message
    text = (part.content if part else choice.text) or ""
    if not text and choice.finish_reason is None:
        return None
    return GenerateChunk(text, choice.finish_reason, prompt_tokens, completion_tokens)


def parse_event(data: bytes) -> GenerateChunk | None:
    """One SSE payload of an OpenAI stream → a protocol chunk; an error event raises."""
    chunk = decode_chunk(data)
    message = chunk.error_message
    if message is not None:
        raise EngineRejected(message, engine_status=chunk.error_status)
    return to_chunk(chunk)
