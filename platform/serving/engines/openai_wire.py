"""The OpenAI chat/completions wire format both engines speak: request bodies and chunks.

Chunks are decoded into small msgspec structs that name only the fields a driver reads, so
msgspec skips the rest of each chunk without building Python objects for it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loraplex.serving.engines.protocol import (
    EngineRejected,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
)

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None  # chat stream
    message: _Delta | None = None  # chat, not streamed
    text: str | None = None  # completions
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None  # with `return_token_ids` (vLLM)
    prompt_token_ids: list[int] | None = None  # completions: on the first chunk's choice


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
    prompt_token_ids: list[int] | None = None  # chat: on the first chunk, with token ids

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
    """The route for a request: chat completions for `messages`, completions for `prompt`
    and for a continuation (token ids)."""
    if request.continue_ids is not None:
        return COMPLETIONS_PATH
    return CHAT_PATH if request.is_chat else COMPLETIONS_PATH


def openai_body(request: GenerateRequest, model: str, **stream_options: bool) -> dict[str, Any]:
    """The JSON body for `request`, addressed to `model`; unset sampling values are left out.

    A continuation is a completion whose prompt is token ids (the rendered chat prompt and
    the answer so far), so the engine neither re-renders nor re-tokenises it."""
    body: dict[str, Any] = {"model": model}
    chat = request.is_chat and request.continue_ids is None
    if request.continue_ids is not None:
        body["prompt"] = request.continue_ids
    elif chat:
        body["messages"] = request.messages
    else:
        body["prompt"] = request.prompt
    for key in ("max_tokens", "temperature", "top_p", "stop", "seed"):
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    if request.options is not None:
        body.update(option_fields(request.options, chat=chat))
    if request.want_token_ids:
        body["return_token_ids"] = True
    body["stream"] = request.stream
    if request.stream and request.include_usage:
        body["stream_options"] = {"include_usage": True, **stream_options}
    return body


#: Options that go to an OpenAI-compatible engine under the same name, when set.
_SAME_NAME = (
    "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
)  # fmt: skip
_CHAT_ONLY = ("tools", "tool_choice", "parallel_tool_calls")


def option_fields(options: GenerateOptions, *, chat: bool) -> dict[str, Any]:
    """The OpenAI request fields for `options`: what a chat or completions body carries.

    Logprobs differ by route: chat says `logprobs: true` and `top_logprobs: k`; completions
    say `logprobs: k` (alternatives per token, 0 for the sampled token alone).
    """
    fields: dict[str, Any] = {}
    if options.n != 1:
        fields["n"] = options.n
    for key in _SAME_NAME + (_CHAT_ONLY if chat else ()):
        value = getattr(options, key)
        if value is not None:
            fields[key] = value
    if options.logprobs:
        if chat:
            fields["logprobs"] = True
            if options.top_logprobs is not None:
                fields["top_logprobs"] = options.top_logprobs
        else:
            fields["logprobs"] = options.top_logprobs or 0
    return fields


def to_chunk(chunk: OpenAIChunk) -> GenerateChunk | None:
    """The protocol chunk for a streamed engine chunk, or None when it carries nothing new.

    Engines stream one choice per chunk (each with its `index`, for n > 1). The first chat
    chunk (the assistant role, no text) carries nothing; a usage-only chunk (`choices: []`)
    carries the final counts.
    """
    usage = chunk.usage
    prompt_tokens = usage.prompt_tokens if usage else None
    completion_tokens = usage.completion_tokens if usage else None
    if not chunk.choices:
        if usage is None:
            return None
        return GenerateChunk("", None, prompt_tokens, completion_tokens)
    part = _choice_chunk(chunk.choices[0], prompt_tokens, completion_tokens)
    if chunk.prompt_token_ids is not None:  # on the first chat chunk (the role, no text)
        part = msgspec.structs.replace(
            part or GenerateChunk(index=chunk.choices[0].index),
            prompt_token_ids=chunk.prompt_token_ids,
        )
    return part


def to_chunks(chunk: OpenAIChunk) -> list[GenerateChunk]:
    """Every choice of a whole (not streamed) reply, the counts on the first."""
    usage = chunk.usage or _Usage()
    chunks = [
        _choice_chunk(choice, None, None) or GenerateChunk(index=choice.index)
        for choice in chunk.choices
    ] or [GenerateChunk(finish_reason="stop")]
    first = chunks[0]
    chunks[0] = msgspec.structs.replace(
        first, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
    )
    return chunks


def _choice_chunk(
    choice: _Choice, prompt_tokens: int | None, completion_tokens: int | None
) -> GenerateChunk | None:
    part = choice.delta or choice.message
    text = (part.content if part else choice.text) or ""
    tool_calls = (part.tool_calls if part else None) or None
    logprobs = choice.logprobs or None
    # A token whose text the engine holds back (half a character) still has its id.
    token_ids = choice.token_ids or None
    if (
        not text
        and choice.finish_reason is None
        and tool_calls is None
        and logprobs is None
        and token_ids is None
        and choice.prompt_token_ids is None
    ):
        return None
    return GenerateChunk(
        text,
        choice.finish_reason,
        prompt_tokens,
        completion_tokens,
        index=choice.index,
        tool_calls=tool_calls,
        logprobs=logprobs,
        token_ids=token_ids,
        prompt_token_ids=choice.prompt_token_ids,
    )


def parse_event(data: bytes) -> GenerateChunk | None:
    """One SSE payload of an OpenAI stream → a protocol chunk; an error event raises."""
    chunk = decode_chunk(data)
    message = chunk.error_message
    if message is not None:
        raise EngineRejected(message, engine_status=chunk.error_status)
    return to_chunk(chunk)
