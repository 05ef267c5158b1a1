"""The dev chat template: plain ChatML without tools, the Hermes / Qwen2.5 layout with them.

Rendered with jinja2 the way transformers renders chat templates (its `tojson` included), so
these tests need no ML library; `test_make_model` checks the saved tokenizer renders alike.
"""

import json
from typing import Any

import pytest

from loraplex.dev.corpus import CHAT_TEMPLATE, TOOLS_INTRO, TOOLS_OUTRO, tool_definitions

jinja2 = pytest.importorskip("jinja2")
sandbox = pytest.importorskip("jinja2.sandbox")

QUESTION = {"role": "user", "content": "What is the weather in Oslo?"}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
}


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """What transformers' `apply_chat_template(..., add_generation_prompt=True)` writes."""
    env = sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda value, **kw: json.dumps(value, ensure_ascii=False, **kw)
    template = env.from_string(CHAT_TEMPLATE)
    return template.render(messages=messages, tools=tools, add_generation_prompt=True)


def tools_system_turn(system: str = "", tools: list[dict[str, Any]] | None = None) -> str:
    lines = "".join(f"\n{json.dumps(tool)}" for tool in tools or tool_definitions())
    return f"<|im_start|>system\n{system}{TOOLS_INTRO}{lines}{TOOLS_OUTRO}<|im_end|>\n"


def test_without_tools_every_turn_is_plain_chatml() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    assert render(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_an_empty_tools_list_renders_as_no_tools() -> None:
    assert render([QUESTION], tools=[]) == render([QUESTION])


def test_tools_open_a_system_turn_that_lists_each_tool_as_one_json_line() -> None:
    text = render([QUESTION], tools=tool_definitions())
    assert text == (
        tools_system_turn()
        + "<|im_start|>user\nWhat is the weather in Oslo?<|im_end|>\n<|im_start|>assistant\n"
    )
    listed = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == tool_definitions()


def test_the_tool_section_asks_for_hermes_tool_call_blocks() -> None:
    text = render([QUESTION], tools=tool_definitions())
    assert text.startswith("<|im_start|>system\n# Tools\n\n")
    assert (
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        "<|im_end|>" in text
    )


def test_the_callers_system_message_comes_first_in_the_tool_system_turn() -> None:
    messages = [{"role": "system", "content": "Be brief."}, QUESTION]
    text = render(messages, tools=tool_definitions())
    assert text.startswith(tools_system_turn("Be brief.\n\n"))
    assert text.count("<|im_start|>system") == 1


def test_a_tool_renders_the_same_whichever_fields_an_engine_passes() -> None:
    tool = tool_definitions()[0]
    function = tool["function"]
    bare = {"strict": False, **dict(reversed(list(function.items())))}  # reordered, padded
    padded = {"type": "function", "function": {**function, "strict": None}}  # a pydantic dump
    expected = render([QUESTION], tools=[tool])
    assert render([QUESTION], tools=[bare]) == expected
    assert render([QUESTION], tools=[padded]) == expected


def test_a_tool_without_description_or_parameters_leaves_them_out() -> None:
    text = render([QUESTION], tools=[{"type": "function", "function": {"name": "now"}}])
    assert '\n{"type": "function", "function": {"name": "now"}}\n</tools>' in text


def test_assistant_tool_calls_are_tool_call_blocks_after_any_text() -> None:
    second = {"type": "function", "function": {"name": "get_time", "arguments": '{"city": "Oslo"}'}}
    messages = [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [CALL, second]},
    ]
    text = render(messages, tools=tool_definitions())
    one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    two = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{one}<|im_end|>\n" in text
    assert f"<|im_start|>assistant\nLooking.\n{one}\n{two}<|im_end|>\n" in text


def test_consecutive_tool_results_share_one_user_turn_of_tool_responses() -> None:
    messages = [
        QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Windy"},
        {"role": "assistant", "content": "Sunny and windy."},
        {"role": "tool", "tool_call_id": "call_3", "content": "Late"},
    ]
    text = render(messages, tools=tool_definitions())
    assert (
        "<|im_start|>user\n<tool_response>\nSunny, 21 C\n</tool_response>\n"
        "<tool_response>\nWindy\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nSunny and windy.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nLate\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    ) in text


def test_tool_turns_render_alike_without_tools_offered() -> None:
    messages = [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]
    with_tools = render(messages, tools=tool_definitions())
    assert with_tools == tools_system_turn() + render(messages)
