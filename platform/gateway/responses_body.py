"""OpenAI's Responses API `response` object and its output items, from a reply's buffer.

A Response is built from what the stream buffer gathered (`Taken`), like chat's bodies in
`replies.py`. Its output is a `message` with the text (an `output_text` part), then one
`function_call` item per call; the ids follow the response's (`resp_X`: `msg_X`, `fc_X_0`).
The streamed events (`responses_events`) build the same objects piece by piece.
"""

from __future__ import annotations

import time
from typing import Any

from loraplex.gateway.buffer import ChoicePart, StreamBuffer, Taken, ToolCallDelta
from loraplex.gateway.responses_schema import (
    JsonObjectText,
    JsonSchemaText,
    ResponsesRequest,
    TextFormat,
)

# Why a reply was cut, in the Responses API's words (anything else ended it normally).
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def request_echo(request: ResponsesRequest) -> dict[str, Any]:
    """The request's fields a Response repeats, with OpenAI's defaults for those not sent
    (but unset sampling fields stay null: the engine's own defaults applied).

    Call after `to_chat(request)` succeeded (the fields are checked there).
    """
    parallel = request.parallel_tool_calls
    return {
        "background": False,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {},
        "parallel_tool_calls": True if parallel is None else parallel,
        "previous_response_id": None,
        "prompt_cache_key": request.prompt_cache_key,
        "safety_identifier": request.safety_identifier,
        "temperature": request.temperature,
        "text": {"format": _format_echo(request.text_format()), "verbosity": "medium"},
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": tool.strict,
            }
            for tool in request.function_tools()
        ],
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": "disabled",
        "user": request.user,
    }


def _format_echo(fmt: TextFormat) -> dict[str, Any]:
    if isinstance(fmt, JsonObjectText):
        return {"type": "json_object"}
    if not isinstance(fmt, JsonSchemaText):
        return {"type": "text"}
    echo: dict[str, Any] = {"type": "json_schema", "name": fmt.name, "schema": fmt.schema}
    if fmt.description is not None:
        echo["description"] = fmt.description
    if fmt.strict is not None:
        echo["strict"] = fmt.strict
    return echo


def response_object(
    response_id: str,
    model: str,
    echo: dict[str, Any],
    *,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The `response` object, in any state."""
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "model": model,
        "output": output,
        "usage": usage,
        **echo,
    }
    if status == "completed":
        body["completed_at"] = int(time.time())
    return body


def usage_of(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The Responses API's usage object (no prompt cache or reasoning to report)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def status_of(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    """The response's status and `incomplete_details` for how its one choice finished."""
    reason = INCOMPLETE.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def message_item(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant `message` output item."""
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def output_text(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    """An `output_text` content part; `logprobs` are the engine's (chat) entries."""
    return {
        "type": "output_text",
        "text": text,
        "annotations": [],
        "logprobs": part_logprobs(logprobs),
    }


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A `function_call` output item."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def part_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat logprob entries as an output_text part's (each token with its UTF-8 bytes)."""
    return [
        {
            "token": entry["token"],
            "bytes": entry.get("bytes") or list(entry["token"].encode()),
            "logprob": entry["logprob"],
            "top_logprobs": [
                {
                    "token": top["token"],
                    "bytes": top.get("bytes") or list(top["token"].encode()),
                    "logprob": top["logprob"],
                }
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries
    ]


def event_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat logprob entries as a text event's (no bytes)."""
    return [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top_logprobs": [
                {"token": top["token"], "logprob": top["logprob"]}
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries
    ]


def entries_of(logprobs: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((logprobs or {}).get("content") or [])


def _suffix(response_id: str) -> str:
    return response_id.removeprefix("resp_")


def message_id(response_id: str, number: int) -> str:
    suffix = _suffix(response_id)
    return f"msg_{suffix}" if number == 0 else f"msg_{suffix}_{number}"


def call_ids(response_id: str, call: ToolCallDelta) -> tuple[str, str]:
    """A function call's item id and call id (the engine's, when it gave one)."""
    index, suffix = call.get("index", 0), _suffix(response_id)
    return f"fc_{suffix}_{index}", call.get("id") or f"call_{suffix}_{index}"


def response_body(
    response_id: str,
    model: str,
    echo: dict[str, Any],
    taken: Taken,
    buffer: StreamBuffer,
    created_at: int | None = None,
) -> dict[str, Any]:
    """The whole (not streamed) Response: a message with the text, then the function calls."""
    part = next((p for p in taken.parts if p.index == 0), ChoicePart(0))
    status, details = status_of(part.finish_reason or taken.finish_reason)
    item_status = "completed" if status == "completed" else "incomplete"
    output = []
    if part.text or not part.tool_calls:
        content = [output_text(part.text, entries_of(part.logprobs))]
        output.append(message_item(message_id(response_id, 0), item_status, content))
    for call in part.tool_calls or []:
        function = call.get("function") or {}
        item_id, call_id = call_ids(response_id, call)
        name, arguments = function.get("name") or "", function.get("arguments") or ""
        output.append(call_item(item_id, call_id, name, arguments, item_status))
    return response_object(
        response_id,
        model,
        echo,
        created_at=created_at if created_at is not None else int(time.time()),
        status=status,
        output=output,
        usage=usage_of(buffer.prompt_tokens, buffer.completion_tokens),
        incomplete_details=details,
    )
