"""The README's OpenAI compatibility table says what each driver sends; this keeps it true.

Each row's sample request is built by both drivers, and every engine-side name a driver
cell names (in backticks, dotted for nested fields) must be in the body that driver sends;
"not sent" means the field's name is in none of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from loraplex.gateway.schemas import decode_body
from loraplex.serving.engines import GenerateOptions, GenerateRequest
from loraplex.serving.engines.openai_wire import openai_body
from loraplex.serving.engines.sglang import chat_body
from loraplex.serving.engines.sglang_fanout import fan_out
from loraplex.serving.engines.sglang_native import generate_body

README = Path(__file__).parents[3] / "README.md"
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}

# row (its first cell) -> (GenerateRequest fields, the same as an OpenAI chat body's fields)
SAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "`max_tokens`, `max_completion_tokens`": ({"max_tokens": 5}, {"max_completion_tokens": 5}),
    "`temperature`, `top_p`, `stop`": (
        {"temperature": 0.5, "top_p": 0.9, "stop": ["x"]},
        {"temperature": 0.5, "top_p": 0.9, "stop": ["x"]},
    ),
    "`seed`": ({"seed": 3}, {"seed": 3}),
    "`n`": ({"options": GenerateOptions(n=2)}, {"n": 2, "temperature": 1}),
    "`presence_penalty`, `frequency_penalty`": (
        {"options": GenerateOptions(presence_penalty=1.0, frequency_penalty=0.5)},
        {"presence_penalty": 1.0, "frequency_penalty": 0.5},
    ),
    "`logit_bias`": ({"options": GenerateOptions(logit_bias={"5": 1.0})}, {"logit_bias": {"5": 1}}),
    "`response_format` `json_object`": (
        {"options": GenerateOptions(response_format={"type": "json_object"})},
        {"response_format": {"type": "json_object"}},
    ),
    "`response_format` `json_schema` (`strict`)": (
        {"options": GenerateOptions(response_format=SCHEMA)},
        {"response_format": SCHEMA},
    ),
    "`tools`, `tool_choice`, `parallel_tool_calls`": (
        {
            "options": GenerateOptions(
                tools=TOOLS, tool_choice="required", parallel_tool_calls=False
            )
        },
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
    ),
    "`logprobs`, `top_logprobs` (chat)": (
        {"options": GenerateOptions(logprobs=True, top_logprobs=2)},
        {"logprobs": True, "top_logprobs": 2},
    ),
    "`logprobs` (completions, an integer)": (
        {"options": GenerateOptions(logprobs=True, top_logprobs=2)},
        {},  # a completions field: checked below on the completions schema
    ),
    "`stream`, `stream_options.include_usage`": ({"stream": True}, {"stream": True}),
    "`stream_options.resumable`": (
        {},
        {"stream": True, "stream_options": {"resumable": True}},
    ),
    "`user`": ({}, {"user": "u"}),
    "`metadata`, `store`": ({}, {"metadata": {"a": "b"}, "store": False}),
}
NOT_FOR_DRIVERS = ("`POST /v1/responses`", "`GET /v1/models/{model}`")


def _rows() -> list[list[str]]:
    text = README.read_text(encoding="utf-8").split("## OpenAI compatibility", 1)[1]
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell.split("(", 1)[0])


def _has(body: dict[str, Any], path: str) -> bool:
    node: Any = body
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _bodies(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    chat = GenerateRequest(rid="r", messages=[{"role": "user", "content": "hi"}], **fields)
    text = GenerateRequest(rid="r", prompt="hi", **fields)
    return {
        "vllm": {**openai_body(text, "m"), **openai_body(chat, "m")},
        "sglang-chat": chat_body(chat, "base"),
        "sglang-completions": generate_body(text),
    }


def test_every_row_has_a_sample() -> None:
    firsts = [row[0] for row in _rows()]
    assert sorted(firsts) == sorted([*SAMPLES, *NOT_FOR_DRIVERS])


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[0])
def test_the_gateway_accepts_the_field_and_each_driver_sends_what_the_table_says(
    row: list[str],
) -> None:
    first, _, vllm, sglang = row
    if first in NOT_FOR_DRIVERS:
        return
    fields, openai_fields = SAMPLES[first]
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **openai_fields}
    decode_body(json.dumps(chat).encode(), "chat")
    bodies = _bodies(fields)
    sglang_chat, _, sglang_completions = sglang.partition(" / ")
    cells = {"vllm": vllm, "sglang-chat": sglang_chat, "sglang-completions": sglang_completions}
    for driver, cell in cells.items():
        if cell.startswith("not sent"):
            for name in _names(first):
                assert not _has(bodies[driver], name), (driver, name)
        elif first == "`n`" and driver.startswith("sglang"):
            request = GenerateRequest(rid="r", prompt="hi", **fields)
            assert [r.rid for r in fan_out(request)] == ["r-0", "r-1"]
        else:
            for name in _names(cell):
                assert _has(bodies[driver], name), (driver, name, bodies[driver])


def test_completions_take_an_integer_logprobs() -> None:
    decode_body(b'{"model": "m", "prompt": "hi", "logprobs": 2}', "completion")
