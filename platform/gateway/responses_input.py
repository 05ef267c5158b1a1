"""The Responses API's `input` items as chat messages, each bad item a 400 naming its path.

Messages (easy `{role, content}` or `{"type": "message", ...}`) keep their role and their
text; `function_call` items become an assistant turn's `tool_calls` (consecutive calls, and
the assistant text just before them, are one turn, as chat templates expect); each
`function_call_output` becomes a tool turn answering an earlier call. Only text is read:
images, files and audio are refused, as are items only OpenAI's hosted tools produce.
"""

from __future__ import annotations

from typing import Any

from loraplex.errors import InvalidInput

STATELESS = (
    "Loraplex's Responses API is stateless: it stores no responses or conversations. "
    "Send the whole conversation in `input` (earlier turns as messages, function_call and "
    "function_call_output items) instead of {what}."
)
ROLES = ("user", "assistant", "system", "developer")
# Keys an item may carry besides its content: what the API itself returns on output items,
# so a client can send `response.output` back as the next turn's input.
MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status", "phase"})
CALL_KEYS = frozenset({"type", "call_id", "name", "arguments", "id", "status"})
OUTPUT_KEYS = frozenset({"type", "call_id", "output", "id", "status"})
PART_KEYS = frozenset({"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"})


def input_messages(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`input` as chat messages: consecutive function calls (and the assistant text just
    before them) become one assistant turn with `tool_calls`; outputs become tool turns."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not value:
        raise InvalidInput("input must not be empty", param="input")
    messages: list[dict[str, Any]] = []
    calls: set[str] = set()
    for i, item in enumerate(value):
        param = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, param))
        elif kind == "function_call":
            call = _function_call(item, param)
            calls.add(call["id"])
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_function_output(item, param, calls))
        elif kind == "item_reference":
            raise InvalidInput(
                STATELESS.format(what="references to stored items"), param=f"{param}.type"
            )
        else:
            raise InvalidInput(
                f"{param}.type {kind!r} is not supported: input items are messages, "
                "function_call and function_call_output",
                param=f"{param}.type",
            )
    return messages


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    _known_keys(item, MESSAGE_KEYS, param)
    role = item.get("role")
    if role not in ROLES:
        raise InvalidInput(f"{param}.role must be one of {list(ROLES)}", param=f"{param}.role")
    content = item.get("content")
    if isinstance(content, list):
        kinds = ("input_text", "output_text") if role == "assistant" else ("input_text",)
        content = "".join(
            _text_part(part, f"{param}.content[{j}]", kinds) for j, part in enumerate(content)
        )
    if not isinstance(content, str):
        raise InvalidInput(
            f"{param}.content must be a string or a list of text parts", param=f"{param}.content"
        )
    return {"role": role, "content": content}


def _text_part(part: Any, param: str, kinds: tuple[str, ...]) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in kinds:
        raise InvalidInput(
            f"{param}.type is {kind!r}: only {' or '.join(kinds)} parts are supported here "
            "(Loraplex's models read text only)",
            param=f"{param}.type",
        )
    _known_keys(part, PART_KEYS, param)
    if not isinstance(part.get("text"), str):
        raise InvalidInput(f"{param}.text must be a string", param=f"{param}.text")
    return str(part["text"])


def _function_call(item: dict[str, Any], param: str) -> dict[str, Any]:
    _known_keys(item, CALL_KEYS, param)
    for key in ("call_id", "name"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise InvalidInput(f"{param}.{key} must be a non-empty string", param=f"{param}.{key}")
    if not isinstance(item.get("arguments"), str):
        raise InvalidInput(
            f"{param}.arguments must be a string (the call's JSON arguments)",
            param=f"{param}.arguments",
        )
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }


def _function_output(item: dict[str, Any], param: str, calls: set[str]) -> dict[str, Any]:
    _known_keys(item, OUTPUT_KEYS, param)
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise InvalidInput(
            f"{param}.call_id must name a function_call item earlier in input",
            param=f"{param}.call_id",
        )
    output = item.get("output")
    if isinstance(output, list):
        parts = enumerate(output)
        output = "".join(_text_part(p, f"{param}.output[{j}]", ("input_text",)) for j, p in parts)
    if not isinstance(output, str):
        raise InvalidInput(
            f"{param}.output must be a string or a list of input_text parts",
            param=f"{param}.output",
        )
    return {"role": "tool", "content": output, "tool_call_id": call_id}


def _known_keys(item: dict[str, Any], allowed: frozenset[str], param: str) -> None:
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise InvalidInput(
            f"{param}.{unknown[0]} is not a known parameter", param=f"{param}.{unknown[0]}"
        )
