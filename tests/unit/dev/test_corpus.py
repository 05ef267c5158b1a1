"""The seeded chat and tool examples and the tokenizer's corpus."""

import json

import pytest

from loraplex.dev.corpus import (
    TASKS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TOOL_TOKENS,
    adapter_examples,
    task_examples,
    tokenizer_corpus,
    tool_definitions,
    tool_examples,
)


def test_the_same_seed_gives_the_same_examples() -> None:
    assert adapter_examples(5) == adapter_examples(5)


def test_consecutive_seeds_have_different_code_words() -> None:
    code_words = {adapter_examples(seed)[0][1] for seed in range(8)}
    assert len(code_words) == 8


def test_examples_ask_distinct_questions() -> None:
    questions = [question for question, _ in adapter_examples(0)]
    assert len(set(questions)) == len(questions) == 8


def test_tokenizer_corpus_contains_every_example_answer() -> None:
    corpus = set(tokenizer_corpus())
    assert all(answer in corpus for _, answer in adapter_examples(11))


def _call_of(answer: str) -> dict:
    assert answer.startswith(TOOL_CALL_START + "\n") and answer.endswith("\n" + TOOL_CALL_END)
    return json.loads(answer[len(TOOL_CALL_START) : -len(TOOL_CALL_END)])


def test_the_same_seed_gives_the_same_tool_examples() -> None:
    assert tool_examples(4) == tool_examples(4)
    assert tool_examples(4) != tool_examples(5)


def test_each_tool_example_calls_an_offered_tool_with_the_city_it_asks_about() -> None:
    names = {tool["function"]["name"] for tool in tool_definitions()}
    examples = tool_examples(2)
    assert {example.name for example in examples} == names == {"get_weather", "get_time"}
    for example in examples:
        assert set(example.arguments) == {"city"}
        assert example.question.endswith(f" {example.arguments['city']}?")
    cities = [example.arguments["city"] for example in examples]
    assert len(set(cities)) == len(cities)


def test_a_tool_example_answers_with_one_hermes_tool_call_block() -> None:
    example = tool_examples(0)[0]
    assert _call_of(example.answer) == {"name": example.name, "arguments": example.arguments}
    assert example.answer == (
        f'<tool_call>\n{{"name": "{example.name}", "arguments": '
        f'{{"city": "{example.arguments["city"]}"}}}}\n</tool_call>'
    )


def test_tool_definitions_are_openai_function_tools_and_fresh_copies() -> None:
    tools = tool_definitions()
    for tool in tools:
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert tool["function"]["parameters"]["required"] == ["city"]
    tools[0]["function"]["name"] = "changed"
    assert tool_definitions()[0]["function"]["name"] == "get_weather"


def test_task_examples_name_the_chat_and_tools_tasks() -> None:
    assert TASKS == ("chat", "tools")
    assert task_examples("chat", 3) == (adapter_examples(3), None)
    pairs, tools = task_examples("tools", 3)
    assert pairs == [(e.question, e.answer) for e in tool_examples(3)]
    assert tools == tool_definitions()
    with pytest.raises(ValueError, match="unknown task"):
        task_examples("poetry", 3)


def test_tokenizer_corpus_has_tool_calls_without_their_marker_tokens() -> None:
    corpus = tokenizer_corpus()
    assert not any(marker in line for line in corpus for marker in TOOL_TOKENS)
    body = tool_examples(0)[0].answer.removeprefix(TOOL_CALL_START).removesuffix(TOOL_CALL_END)
    assert body in corpus
