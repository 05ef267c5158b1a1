"""The streaming JSONL validator: what it accepts, and each refusal with its line number."""

import json
from typing import Any

import pytest

from loraplex.finetune.datasets import (
    DatasetRejected,
    DatasetStats,
    JsonlValidator,
    LineError,
    validate_jsonl,
)

CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the code word?"},
        {"role": "assistant", "content": "The code word is amber."},
    ]
}
PREFERENCE = {
    "input": {"messages": [{"role": "user", "content": "Say hi."}]},
    "preferred_output": [{"role": "assistant", "content": "Hi!"}],
    "non_preferred_output": [{"role": "assistant", "content": "Go away."}],
}


def jsonl(*rows: Any) -> bytes:
    """A file body: each row as JSON (bytes pass through unchanged), one per line."""
    lines = [row if isinstance(row, bytes) else json.dumps(row).encode() for row in rows]
    return b"\n".join(lines) + b"\n"


def validate(body: bytes, method: str = "supervised", **limits: Any) -> DatasetStats:
    """Validate a body split into 7-byte chunks, so lines always straddle chunk boundaries."""
    options: dict[str, Any] = {"max_rows": 1000, "max_bytes": 1_000_000} | limits
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
    return validate_jsonl(chunks, purpose_method=method, **options)  # type: ignore[arg-type]


def rejection(body: bytes, method: str = "supervised", **limits: Any) -> DatasetRejected:
    """The DatasetRejected a body raises."""
    with pytest.raises(DatasetRejected) as caught:
        validate(body, method, **limits)
    return caught.value


def with_message(**changes: Any) -> dict[str, Any]:
    """CHAT with its assistant message changed."""
    return {"messages": [*CHAT["messages"][:2], {"role": "assistant", "content": "x"} | changes]}


def test_valid_chat_file_reports_rows_bytes_and_assistant_turns() -> None:
    body = jsonl(CHAT, CHAT, CHAT)
    stats = validate(body)
    assert (stats.rows, stats.size_bytes, stats.assistant_turns) == (3, len(body), 3)
    assert stats.tokens > 0 and not stats.tokens_counted


def test_counted_tokens_are_summed_when_a_counter_is_given() -> None:
    stats = validate(jsonl(CHAT, CHAT), count_tokens=lambda messages: 10 * len(messages))
    assert stats.tokens == 60 and stats.tokens_counted


def test_blank_lines_and_a_missing_final_newline_are_accepted() -> None:
    body = json.dumps(CHAT).encode() + b"\n\n" + json.dumps(CHAT).encode()
    assert validate(body).rows == 2


def test_utf8_bom_and_crlf_line_endings_are_accepted() -> None:
    body = b"\xef\xbb\xbf" + jsonl(CHAT, CHAT).replace(b"\n", b"\r\n")
    assert validate(body).rows == 2


def test_incremental_validator_accepts_one_byte_chunks() -> None:
    validator = JsonlValidator(purpose_method="supervised", max_rows=10, max_bytes=10_000)
    for byte in jsonl(CHAT, CHAT):
        validator.feed(bytes([byte]))
    assert validator.finish().rows == 2


def test_assistant_turns_with_weight_zero_are_not_counted() -> None:
    row = {"messages": [*CHAT["messages"], {"role": "user", "content": "Again?"}]}
    row["messages"].append({"role": "assistant", "content": "Yes.", "weight": 0})
    assert validate(jsonl(row)).assistant_turns == 1


def test_invalid_json_is_refused_with_its_line_number() -> None:
    error = rejection(jsonl(CHAT, b'{"messages": [', CHAT))
    assert error.errors[0].line == 2 and "invalid JSON" in error.errors[0].message


def test_non_utf8_line_is_refused() -> None:
    error = rejection(jsonl(CHAT, CHAT, b'{"messages": "\xff\xfe"}'))
    assert error.errors == [LineError(3, "not valid UTF-8 (byte 15 of the line)")]


def test_line_that_is_not_an_object_is_refused() -> None:
    error = rejection(jsonl([CHAT]))
    assert error.errors[0].message == "the line is a JSON array, not an object"


def test_row_without_messages_is_refused() -> None:
    error = rejection(jsonl({"prompt": "hi", "completion": "there"}))
    assert "missing a 'messages' list" in error.errors[0].message


def test_empty_messages_list_is_refused() -> None:
    assert "'messages' is empty" in rejection(jsonl({"messages": []})).errors[0].message


def test_unknown_role_is_refused_naming_the_allowed_ones() -> None:
    row = {"messages": [{"role": "narrator", "content": "x"}, *CHAT["messages"]]}
    message = rejection(jsonl(row)).errors[0].message
    assert "messages[0] has role 'narrator'" in message and "system, user, assistant" in message


def test_message_without_role_is_refused() -> None:
    row = {"messages": [{"content": "x"}, *CHAT["messages"]]}
    assert "messages[0] has no role" in rejection(jsonl(row)).errors[0].message


def test_tool_role_is_refused_as_unsupported() -> None:
    row = {"messages": [*CHAT["messages"], {"role": "tool", "content": "42"}]}
    assert "tool and function messages are not supported" in rejection(jsonl(row)).message


def test_assistant_tool_calls_are_refused() -> None:
    row = with_message(tool_calls=[{"id": "1", "type": "function"}])
    assert "tool calls are not supported" in rejection(jsonl(row)).errors[0].message


def test_tools_schema_on_a_row_is_refused() -> None:
    row = CHAT | {"tools": [{"type": "function", "function": {"name": "f"}}]}
    assert "function calling is not supported" in rejection(jsonl(row)).errors[0].message


def test_message_without_string_content_is_refused() -> None:
    row = with_message(content=[{"type": "text", "text": "hi"}])
    assert "array content; content must be a string" in rejection(jsonl(row)).errors[0].message


def test_message_with_missing_content_is_refused() -> None:
    row = {"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}
    assert "messages[0] has no content" in rejection(jsonl(row)).errors[0].message


def test_row_without_assistant_turn_is_refused() -> None:
    row = {"messages": [{"role": "user", "content": "Hello?"}]}
    assert "no assistant message" in rejection(jsonl(CHAT, row)).errors[0].message


def test_row_whose_assistant_turns_all_have_weight_zero_is_refused() -> None:
    assert "weight 0" in rejection(jsonl(with_message(weight=0))).errors[0].message


def test_weight_other_than_zero_or_one_is_refused() -> None:
    assert "must be 0 or 1" in rejection(jsonl(with_message(weight=0.5))).errors[0].message


def test_empty_file_is_refused() -> None:
    error = rejection(b"")
    assert "empty" in error.message and error.errors == []


def test_file_of_blank_lines_is_refused_as_empty() -> None:
    assert "empty" in rejection(b"\n  \n\n").message


def test_file_over_the_row_limit_is_refused_at_the_first_extra_row() -> None:
    error = rejection(jsonl(CHAT, CHAT, CHAT), max_rows=2)
    assert error.errors[-1].line == 3 and "2-row limit" in error.message


def test_file_over_the_byte_limit_is_refused() -> None:
    assert "100-byte limit" in rejection(jsonl(CHAT, CHAT), max_bytes=100).message


def test_byte_limit_stops_reading_before_the_rest_of_the_stream() -> None:
    def chunks() -> Any:
        yield jsonl(CHAT)
        yield jsonl(CHAT)
        raise AssertionError("read past the byte limit")

    limit = len(jsonl(CHAT)) + 10
    with pytest.raises(DatasetRejected):
        validate_jsonl(chunks(), purpose_method="supervised", max_rows=10, max_bytes=limit)


def test_row_over_the_context_length_is_refused() -> None:
    error = rejection(
        jsonl(CHAT, CHAT), max_tokens_per_row=20, count_tokens=lambda m: 15 if len(m) < 3 else 25
    )
    assert error.errors[0] == LineError(
        1, "the row has 25 tokens, over the 20-token context length"
    )


def test_context_limit_without_a_counter_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="count_tokens"):
        JsonlValidator(purpose_method="supervised", max_rows=1, max_bytes=1, max_tokens_per_row=8)


def test_every_bad_line_is_listed_with_its_number() -> None:
    error = rejection(jsonl(CHAT, b"nope", CHAT, b"[]", {"messages": []}))
    assert [e.line for e in error.errors] == [2, 4, 5]
    assert error.message.startswith("3 invalid lines: line 2: invalid JSON")


def test_reading_stops_after_twenty_problems() -> None:
    error = rejection(jsonl(*([b"nope"] * 50)))
    assert len(error.errors) == 20 and "stopped reading after 20 problems" in error.message


def test_valid_preference_file_counts_both_outputs() -> None:
    stats = validate(jsonl(PREFERENCE, PREFERENCE), "dpo", count_tokens=len)
    assert stats.rows == 2 and stats.assistant_turns == 4 and stats.tokens == 8


def test_preference_row_without_input_is_refused() -> None:
    row = {k: v for k, v in PREFERENCE.items() if k != "input"}
    assert "missing an 'input' object" in rejection(jsonl(row), "dpo").errors[0].message


def test_preference_input_ending_with_assistant_is_refused() -> None:
    prompt = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    row = PREFERENCE | {"input": {"messages": prompt}}
    assert "must end with a user message" in rejection(jsonl(row), "dpo").errors[0].message


def test_preference_output_that_is_not_one_assistant_message_is_refused() -> None:
    row = PREFERENCE | {"preferred_output": [{"role": "user", "content": "Hi!"}]}
    assert "must have role 'assistant'" in rejection(jsonl(row), "dpo").errors[0].message


def test_preference_output_missing_is_refused() -> None:
    row = {k: v for k, v in PREFERENCE.items() if k != "non_preferred_output"}
    message = rejection(jsonl(row), "dpo").errors[0].message
    assert "'non_preferred_output' must be a list holding exactly one" in message


def test_identical_preferred_and_non_preferred_outputs_are_refused() -> None:
    row = PREFERENCE | {"non_preferred_output": PREFERENCE["preferred_output"]}
    assert "identical" in rejection(jsonl(row), "dpo").errors[0].message


def test_chat_row_in_a_preference_file_is_refused() -> None:
    assert "missing an 'input' object" in rejection(jsonl(CHAT), "dpo").errors[0].message


def test_a_line_longer_than_any_row_is_refused_before_it_is_held():
    validator = JsonlValidator(purpose_method="supervised", max_rows=10, max_bytes=2**30)
    with pytest.raises(DatasetRejected) as caught:
        for _ in range(10):  # 10 MiB without a newline, in 1 MiB chunks
            validator.feed(b"x" * 2**20)
    assert "longer than" in caught.value.message
    assert caught.value.errors[0].line == 1


def test_a_line_nested_too_deep_is_an_invalid_line_not_a_crash():
    with pytest.raises(DatasetRejected) as caught:
        validate_jsonl(
            [b"[" * 100_000 + b"]" * 100_000 + b"\n"],
            purpose_method="supervised", max_rows=10, max_bytes=2**30,
        )  # fmt: skip
    assert "nested too deep" in str(caught.value)
