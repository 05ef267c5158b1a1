"""How the inference routes appear in the OpenAPI document.

The handlers decode their bodies themselves (`schemas.decode_body`,
`responses_schema.decode_request`), so Litestar sees no body; these `operation_class`es
describe the same msgspec Structs the handlers decode, and the answers `replies.py` and
`responses_body.py` build, without touching how a request is parsed or refused.
"""

from __future__ import annotations

from typing import Any

from loraplex.api.openapi import documented
from loraplex.gateway.responses_schema import ResponsesRequest
from loraplex.gateway.schemas import ChatCompletionRequest, CompletionRequest

_INT = {"type": "integer"}
_STR = {"type": "string"}
_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT},
}
_FINISH = {"type": "string"}
_TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": _STR,
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": _STR, "arguments": _STR},
        },
    },
}


def _completion(object_name: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": _STR,
            "object": {"const": object_name},
            "created": _INT,
            "model": _STR,
            "choices": {"type": "array", "items": choice},
            "usage": _USAGE,
        },
    }


CHAT_COMPLETION = {
    "title": "ChatCompletion",
    **_completion(
        "chat.completion",
        {
            "type": "object",
            "required": ["index", "message", "finish_reason"],
            "properties": {
                "index": _INT,
                "message": {
                    "type": "object",
                    "required": ["role", "content"],
                    "properties": {
                        "role": {"const": "assistant"},
                        "content": {"type": ["string", "null"]},
                        "tool_calls": {"type": "array", "items": _TOOL_CALL},
                    },
                },
                "logprobs": {"type": ["object", "null"]},
                "finish_reason": _FINISH,
            },
        },
    ),
}
TEXT_COMPLETION = {
    "title": "TextCompletion",
    **_completion(
        "text_completion",
        {
            "type": "object",
            "required": ["index", "text", "finish_reason"],
            "properties": {
                "index": _INT,
                "text": _STR,
                "logprobs": {"type": ["object", "null"]},
                "finish_reason": _FINISH,
            },
        },
    ),
}
RESPONSE = {
    "title": "Response",
    "type": "object",
    "required": ["id", "object", "created_at", "status", "model", "output"],
    "properties": {
        "id": _STR,
        "object": {"const": "response"},
        "created_at": _INT,
        "completed_at": _INT,
        "status": {"enum": ["completed", "incomplete", "in_progress", "failed"]},
        "model": _STR,
        "output": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "type", "status"],
                "properties": {
                    "id": _STR,
                    "type": {"enum": ["message", "function_call"]},
                    "status": _STR,
                },
            },
        },
        "usage": {
            "type": ["object", "null"],
            "properties": {"input_tokens": _INT, "output_tokens": _INT, "total_tokens": _INT},
        },
        "error": {"type": ["object", "null"]},
        "incomplete_details": {"type": ["object", "null"]},
    },
}

CHAT = documented(body=ChatCompletionRequest, ok=CHAT_COMPLETION, streams=True)
COMPLETIONS = documented(body=CompletionRequest, ok=TEXT_COMPLETION, streams=True)
RESPONSES = documented(body=ResponsesRequest, ok=RESPONSE, streams=True)
