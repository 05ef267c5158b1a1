"""Replies with several choices, tool calls and logprobs: coalesced, encoded, assembled."""

from __future__ import annotations

import json

from loraplex.gateway.buffer import StreamBuffer, merge_tool_calls
from loraplex.gateway.sse import ChunkEncoder, Usage


def _events(batch: list[bytes]) -> list[dict | str]:
    out: list[dict | str] = []
    for event in batch:
        data = event.decode().split("data: ", 1)[1].strip()
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_each_choice_coalesces_on_its_own_and_the_reply_ends_with_the_last() -> None:
    buffer = StreamBuffer(max_bytes=1000, choices=2)
    buffer.push("Hel", index=0)
    buffer.push("Bon", index=1)
    buffer.push("lo", index=0)
    assert not buffer.finish_choice(0, "stop")
    taken = buffer.take()
    assert [(p.index, p.text, p.finish_reason) for p in taken.parts] == [
        (0, "Hello", "stop"),
        (1, "Bon", None),
    ]
    assert taken.finish_reason is None
    buffer.push("jour", index=1)
    assert buffer.finish_choice(1, "length")
    buffer.finish()
    taken = buffer.take()
    assert [(p.index, p.text, p.finish_reason) for p in taken.parts] == [(1, "jour", "length")]
    assert taken.finish_reason == "stop"


def test_tool_call_deltas_merge_per_call_and_keep_the_first_name_and_id() -> None:
    merged = merge_tool_calls(
        [],
        [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}},
            {"index": 0, "function": {"arguments": '{"city": '}},
            {"index": 1, "id": "call_2", "type": "function", "function": {"name": "g"}},
            {"index": 0, "function": {"arguments": '"Oslo"}'}},
        ],
    )
    assert merged == [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": '{"city": "Oslo"}'}},
        {"index": 1, "id": "call_2", "type": "function",
         "function": {"name": "g", "arguments": ""}},
    ]  # fmt: skip


def test_logprobs_concatenate_across_coalesced_chunks() -> None:
    buffer = StreamBuffer(max_bytes=1000)
    buffer.push("a", logprobs={"content": [{"token": "a", "logprob": -0.1}]})
    buffer.push("b", logprobs={"content": [{"token": "b", "logprob": -0.2}]})
    part = buffer.take().parts[0]
    assert part.text == "ab"
    assert [e["token"] for e in part.logprobs["content"]] == ["a", "b"]  # type: ignore[index]


def test_a_chat_stream_of_two_choices_has_a_role_per_choice_and_indexed_chunks() -> None:
    encoder = ChunkEncoder("chatcmpl-1", "m", "chat", created=1, choices=2)
    buffer = StreamBuffer(max_bytes=1000, choices=2)
    opening = _events(encoder.opening())
    assert [e["choices"][0]["index"] for e in opening] == [0, 1]  # type: ignore[index]
    buffer.push("x", index=1, tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}])
    buffer.finish_choice(1, "tool_calls")
    events = _events(encoder.progress(buffer.take()))
    choice = events[0]["choices"][0]  # type: ignore[index]
    assert choice["index"] == 1 and choice["delta"]["content"] == "x"
    assert choice["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert events[1]["choices"][0] == {  # type: ignore[index]
        "index": 1, "delta": {}, "logprobs": None, "finish_reason": "tool_calls",
    }  # fmt: skip
    closing = _events(encoder.closing(Usage(3, 4)))
    assert closing[0]["usage"]["total_tokens"] == 7 and closing[-1] == "[DONE]"  # type: ignore[index]


def test_event_ids_stay_consecutive_across_choices() -> None:
    encoder = ChunkEncoder("chatcmpl-1", "m", "chat", created=1, choices=2)
    buffer = StreamBuffer(max_bytes=1000, choices=2)
    batch = encoder.opening()
    buffer.push("a", index=0)
    buffer.push("b", index=1)
    batch += encoder.progress(buffer.take())
    ids = [int(e.decode().split("\n", 1)[0].removeprefix("id: ")) for e in batch]
    assert ids == [0, 1, 2, 3]
