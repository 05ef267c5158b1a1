"""OpenAI's whole (not streamed) response bodies for chat and text completions."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from loraplex.gateway.buffer import ChoicePart, StreamBuffer, Taken

if TYPE_CHECKING:
    from loraplex.gateway.service import AdmittedRequest


def completion_body(
    completion_id: str, call: AdmittedRequest, taken: Taken, buffer: StreamBuffer
) -> dict[str, Any]:
    """The `chat.completion` or `text_completion` body: every choice, then the usage."""
    parts = {part.index: part for part in taken.parts}
    chat = call.kind == "chat"
    choices = [
        (chat_choice if chat else text_choice)(parts.get(index) or ChoicePart(index))
        for index in range(call.request.choices)
    ]
    return {
        "id": completion_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": call.target.model,
        "choices": choices,
        "usage": usage_of(buffer),
    }


def chat_choice(part: ChoicePart) -> dict[str, Any]:
    """One chat choice: the assistant message (content null when it only called tools)."""
    message: dict[str, Any] = {"role": "assistant", "content": part.text}
    if part.tool_calls:
        message["tool_calls"] = [_whole_call(call) for call in part.tool_calls]
        message["content"] = part.text or None
    return {
        "index": part.index,
        "message": message,
        "logprobs": part.logprobs,
        "finish_reason": part.finish_reason or "stop",
    }


def text_choice(part: ChoicePart) -> dict[str, Any]:
    """One text completion choice."""
    return {
        "index": part.index,
        "text": part.text,
        "logprobs": part.logprobs,
        "finish_reason": part.finish_reason or "stop",
    }


def usage_of(buffer: StreamBuffer) -> dict[str, int]:
    """OpenAI's usage object from the counts the engine reported."""
    return {
        "prompt_tokens": buffer.prompt_tokens,
        "completion_tokens": buffer.completion_tokens,
        "total_tokens": buffer.prompt_tokens + buffer.completion_tokens,
    }


def _whole_call(call: dict[str, Any]) -> dict[str, Any]:
    """A merged tool-call delta as a message's tool call (no `index`)."""
    function = call.get("function") or {}
    return {
        "id": call.get("id") or "",
        "type": call.get("type") or "function",
        "function": {
            "name": function.get("name") or "",
            "arguments": function.get("arguments") or "",
        },
    }
