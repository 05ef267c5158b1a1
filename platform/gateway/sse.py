"""OpenAI stream chunks as SSE bytes, built with as little work per token as possible.

Every chunk of one response shares everything but the text, so the JSON around the text is
encoded once per response and each token costs one string encode and a few concatenations
(cpu-engine-notes.md: a gateway that re-serialises whole chunks loses ~30% of throughput).
"""

from __future__ import annotations

import time
from typing import Literal

import msgspec

_json = msgspec.json.Encoder()

HEARTBEAT = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"

Kind = Literal["chat", "completion"]


class ChunkEncoder:
    """Encodes the SSE events of one response (chat or text completion)."""

    def __init__(self, completion_id: str, model: str, kind: Kind, created: int | None = None):
        self.completion_id, self.model, self.kind = completion_id, model, kind
        self.created = created if created is not None else int(time.time())
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = _json.encode(
            {"id": completion_id, "object": obj, "created": self.created, "model": model}
        )
        self._head = head[:-1] + b',"choices":[{"index":0,'
        self._text_key = b'"delta":{"content":' if kind == "chat" else b'"text":'
        self._text_tail = (
            b'},"logprobs":null,"finish_reason":null}]}'
            if kind == "chat"
            else b',"logprobs":null,"finish_reason":null}]}'
        )

    def role(self, event_id: int) -> bytes:
        """The first chat chunk, announcing the assistant role (OpenAI sends it first)."""
        body = (
            self._head
            + b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
        )
        return _event(event_id, body)

    def text(self, event_id: int, text: str) -> bytes:
        """A chunk carrying new text."""
        return _event(event_id, self._head + self._text_key + _json.encode(text) + self._text_tail)

    def finish(self, event_id: int, reason: str) -> bytes:
        """The chunk carrying the finish reason."""
        empty = b'"delta":{}' if self.kind == "chat" else b'"text":""'
        body = (
            self._head
            + empty
            + b',"logprobs":null,"finish_reason":'
            + _json.encode(reason)
            + b"}]}"
        )
        return _event(event_id, body)

    def usage(self, event_id: int, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The `include_usage` chunk: empty choices and the token counts."""
        usage = _json.encode(
            {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        )
        head = self._head[: -len(b'[{"index":0,')]
        return _event(event_id, head + b'[],"usage":' + usage + b"}")

    def error(self, event_id: int, code: str, message: str) -> bytes:
        """An error event in OpenAI's error shape; the stream ends after it."""
        err = {
            "error": {
                "message": message,
                "type": "server_error" if code.startswith("engine") else code,
                "param": None,
                "code": code,
            }
        }
        return _event(event_id, _json.encode(err))


def _event(event_id: int, body: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (event_id, body)
