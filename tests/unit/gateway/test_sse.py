"""SSE encoding: OpenAI's chunk shapes, byte for byte parseable, with event ids."""

from __future__ import annotations

import json

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.sse import ChunkEncoder


def _data(event: bytes) -> tuple[int, dict]:
    head, data = event.decode().rstrip("\n").split("\n")
    return int(head.removeprefix("id: ")), json.loads(data.removeprefix("data: "))


def test_chat_chunks_have_openais_shape() -> None:
    encoder = ChunkEncoder("chatcmpl-1", "bot@prod", "chat", created=7)
    event_id, role = _data(encoder.role(0))
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""} and event_id == 0
    _, text = _data(encoder.text(1, 'say "hi"\n'))
    assert text == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "bot@prod",
        "choices": [
            {
                "index": 0,
                "delta": {"content": 'say "hi"\n'},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    _, finish = _data(encoder.finish(2, "length"))
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    _, usage = _data(encoder.usage(3, 5, 7))
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "total_tokens": 12,
    }


def test_completion_chunks_carry_text() -> None:
    encoder = ChunkEncoder("cmpl-1", "m", "completion", created=1)
    _, text = _data(encoder.text(1, "abc"))
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "abc"


def test_error_event_is_openais_error_shape() -> None:
    _, error = _data(ChunkEncoder("c", "m", "chat").error(9, "slow_client", "too slow"))
    assert error == {
        "error": {
            "message": "too slow",
            "type": "slow_client",
            "param": None,
            "code": "slow_client",
        }
    }


def test_buffer_coalesces_pending_text_into_one_take() -> None:
    buffer = StreamBuffer(max_bytes=100)
    assert buffer.push("a") and buffer.push("b") and buffer.push("c")
    taken = buffer.take()
    assert (taken.text, taken.pieces) == ("abc", 3)
    assert buffer.take().text == ""


def test_buffer_refuses_past_its_bound_and_first_failure_wins() -> None:
    buffer = StreamBuffer(max_bytes=3)
    assert buffer.push("abc") and not buffer.push("d")
    buffer.fail("slow_client", "x")
    buffer.fail("engine_died", "y")
    buffer.finish("stop")
    assert buffer.take().error == ("slow_client", "x")


def test_a_heartbeat_between_events_is_no_event_to_openais_sdk() -> None:
    """OpenAI's Python SDK dispatches a comment block closed by its own blank line as an
    event with empty data once an event id was seen, and fails to parse it."""
    from openai._streaming import SSEDecoder

    from loraplex.gateway.sse import DONE, HEARTBEAT

    encoder = ChunkEncoder("chatcmpl-1", "m", "chat")
    body = encoder.role(0) + HEARTBEAT + HEARTBEAT + encoder.text(1, "hi") + HEARTBEAT + DONE

    events = list(SSEDecoder().iter_bytes(iter([body])))
    assert [e.data[:10] for e in events] == ['{"id":"cha', '{"id":"cha', "[DONE]"]
