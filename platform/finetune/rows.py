"""Checks one parsed row of an OpenAI fine-tuning file: chat (supervised) or preference (DPO).

Pure functions over parsed JSON; the streaming validator turns their `RowInvalid` into line
errors. A row is refused on its first problem, so each line reports one clear reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Method = Literal["supervised", "dpo"]
Message = dict[str, Any]

ALLOWED_ROLES = ("system", "user", "assistant")
# Tool use needs a tool schema in the template and engine support for tool calls; refused by
# name so the user learns it is the feature, not a typo, that is unsupported.
TOOL_ROLES = frozenset({"tool", "function"})
TOOL_FIELDS = ("tool_calls", "function_call")
ROW_TOOL_FIELDS = ("tools", "functions")


class RowInvalid(ValueError):
    """A row that cannot be trained on; the message says why, in the user's terms."""


@dataclass(frozen=True)
class CheckedRow:
    """A valid row: the conversations it trains on and its trainable assistant turns."""

    conversations: tuple[list[Message], ...]
    assistant_turns: int


def check_row(row: Any, method: Method) -> CheckedRow:
    """Check a parsed JSONL row for `method`; raise RowInvalid with the first problem."""
    if not isinstance(row, dict):
        raise RowInvalid(f"the line is a JSON {_json_kind(row)}, not an object")
    _refuse_tools(row, "the row")
    if method == "dpo":
        return _check_preference_row(row)
    return _check_chat_row(row)


def _check_chat_row(row: dict[str, Any]) -> CheckedRow:
    """A supervised row: `messages` with at least one trainable assistant turn."""
    messages = _messages_list(row.get("messages"), "'messages'")
    roles = [_check_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    if "assistant" not in roles:
        raise RowInvalid("no assistant message: there is nothing to train on")
    trained = sum(1 for m in messages if m["role"] == "assistant" and m.get("weight", 1) == 1)
    if trained == 0:
        raise RowInvalid("every assistant message has weight 0: there is nothing to train on")
    return CheckedRow(conversations=(messages,), assistant_turns=trained)


def _check_preference_row(row: dict[str, Any]) -> CheckedRow:
    """A DPO row: `input.messages` ending with a user turn, and one preferred, one not."""
    prompt_holder = row.get("input")
    if not isinstance(prompt_holder, dict):
        raise RowInvalid("missing an 'input' object with the prompt 'messages'")
    _refuse_tools(prompt_holder, "'input'")
    prompt = _messages_list(prompt_holder.get("messages"), "'input.messages'")
    roles = [_check_message(m, f"input.messages[{i}]") for i, m in enumerate(prompt)]
    if roles[-1] != "user":
        raise RowInvalid("'input.messages' must end with a user message")
    preferred = _single_output(row, "preferred_output")
    rejected = _single_output(row, "non_preferred_output")
    if preferred["content"] == rejected["content"]:
        raise RowInvalid("'preferred_output' and 'non_preferred_output' are identical")
    return CheckedRow(conversations=([*prompt, preferred], [*prompt, rejected]), assistant_turns=2)


def _single_output(row: dict[str, Any], field: str) -> Message:
    """The one assistant message of a DPO output list."""
    value = row.get(field)
    if not isinstance(value, list) or len(value) != 1:
        raise RowInvalid(f"'{field}' must be a list holding exactly one assistant message")
    message: Message = value[0]
    if _check_message(message, f"{field}[0]") != "assistant":
        raise RowInvalid(f"'{field}[0]' must have role 'assistant'")
    return message


def _messages_list(value: Any, name: str) -> list[Message]:
    """A non-empty list of messages (each checked by the caller)."""
    if value is None:
        raise RowInvalid(f"missing a {name} list")
    if not isinstance(value, list):
        raise RowInvalid(f"{name} is a JSON {_json_kind(value)}, not a list")
    if not value:
        raise RowInvalid(f"{name} is empty")
    return value


def _check_message(message: Any, where: str) -> str:
    """Check one message and return its role."""
    if not isinstance(message, dict):
        raise RowInvalid(f"{where} is a JSON {_json_kind(message)}, not an object")
    role = message.get("role")
    if role in TOOL_ROLES:
        raise RowInvalid(f"{where} has role '{role}': tool and function messages are not supported")
    if role not in ALLOWED_ROLES:
        expected = ", ".join(ALLOWED_ROLES)
        shown = "no role" if role is None else f"role {role!r}"
        raise RowInvalid(f"{where} has {shown}; expected one of {expected}")
    for field in TOOL_FIELDS:
        if message.get(field):
            raise RowInvalid(f"{where} has '{field}': tool calls are not supported")
    content = message.get("content")
    if not isinstance(content, str):
        shown = "no content" if content is None else f"{_json_kind(content)} content"
        raise RowInvalid(f"{where} has {shown}; content must be a string")
    _check_weight(message, role, where)
    return str(role)


def _check_weight(message: Message, role: str, where: str) -> None:
    """OpenAI's per-message `weight`: 0 or 1, and only on assistant messages."""
    if "weight" not in message:
        return
    weight = message["weight"]
    if role != "assistant":
        raise RowInvalid(f"{where} has a 'weight'; only assistant messages may have one")
    if isinstance(weight, bool) or weight not in (0, 1):
        raise RowInvalid(f"{where} has weight {weight!r}; weight must be 0 or 1")


def _refuse_tools(holder: dict[str, Any], where: str) -> None:
    """Tool schemas on a row are refused: the trainer cannot render them into the template."""
    for field in ROW_TOOL_FIELDS:
        if holder.get(field):
            raise RowInvalid(f"{where} has '{field}': function calling is not supported")


def _json_kind(value: Any) -> str:
    """The JSON type name of a parsed value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
