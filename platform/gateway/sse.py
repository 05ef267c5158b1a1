"""OpenAI stream chunks as SSE bytes, built with as little work per token as possible.

Every chunk of one response shares everything but the text, so the JSON around the text is
encoded once per response and each token costs one string encode and a few concatenations
(measured on the CPU engines: a gateway that re-serialised whole chunks kept about 70% of
the engine's token throughput; `loraplex bench gateway` shows what this one keeps).
"""

from __future__ import annotations

import time
from typing import Any, Literal, Protocol

import msgspec

from loraplex.gateway.buffer import ChoicePart, Taken

_json = msgspec.json.Encoder()

# A comment line with no blank line after it: the bytes keep proxies and read timeouts
# alive, and the block is closed by the next event's blank line. A comment closed by its own
# blank line breaks OpenAI's Python SDK: its decoder keeps the last event id (as the SSE spec
# says) and so dispatches that block as an event with empty data, which it then fails to
# parse as JSON (seen as a JSONDecodeError when a stream went quiet for a heartbeat).
HEARTBEAT = b": keep-alive\n"
DONE = b"data: [DONE]\n\n"

Kind = Literal["chat", "completion"]


class Usage(msgspec.Struct, frozen=True):
    """The token counts a reply ends with."""

    prompt_tokens: int
    completion_tokens: int


class EventEncoder(Protocol):
    """Turns what one reply's buffer gives into SSE events, numbering them 0, 1, 2, ...

    Every event a client can resume after carries its id; ids are consecutive, so the
    resumable copy can store event N as entry N + 1.
    """

    def opening(self) -> list[bytes]:
        """The events sent before any output (chat: the assistant role)."""
        ...

    def progress(self, taken: Taken) -> list[bytes]:
        """The events for one take: each choice's new output, then its finish if it ended."""
        ...

    def closing(self, usage: Usage | None) -> list[bytes]:
        """The events after the whole reply ended (usage when asked for, the end marker)."""
        ...

    def failure(self, code: str, message: str) -> list[bytes]:
        """The error event a failed reply ends with."""
        ...


class ChunkEncoder:
    """Encodes the SSE events of one chat or text completion response, OpenAI's chunks."""

    def __init__(
        self,
        completion_id: str,
        model: str,
        kind: Kind,
        created: int | None = None,
        choices: int = 1,
    ):
        self.completion_id, self.model, self.kind = completion_id, model, kind
        self.choices = choices
        self.created = created if created is not None else int(time.time())
        self._object = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = _json.encode(
            {"id": completion_id, "object": self._object, "created": self.created, "model": model}
        )
        self._head = head[:-1] + b',"choices":[{"index":0,'
        self._next_id = 0
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

    def rich(self, event_id: int, part: ChoicePart) -> bytes:
        """A chunk for a choice other than the first, or carrying tool calls or logprobs."""
        choice: dict[str, Any] = {"index": part.index}
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if part.text:
                delta["content"] = part.text
            if part.tool_calls:
                delta["tool_calls"] = part.tool_calls
            choice["delta"] = delta
        else:
            choice["text"] = part.text
        choice["logprobs"] = part.logprobs
        choice["finish_reason"] = None
        body = {
            "id": self.completion_id,
            "object": self._object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }
        return _event(event_id, _json.encode(body))

    def finish_of(self, event_id: int, index: int, reason: str) -> bytes:
        """The finish chunk of choice `index`."""
        if index == 0:
            return self.finish(event_id, reason)
        head = self._head[: -len(b"0,")] + str(index).encode() + b","
        empty = b'"delta":{}' if self.kind == "chat" else b'"text":""'
        body = head + empty + b',"logprobs":null,"finish_reason":' + _json.encode(reason) + b"}]}"
        return _event(event_id, body)

    def role_of(self, event_id: int, index: int) -> bytes:
        """The first chunk of chat choice `index`, announcing the assistant role."""
        if index == 0:
            return self.role(event_id)
        head = self._head[: -len(b"0,")] + str(index).encode() + b","
        body = (
            head
            + b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
        )
        return _event(event_id, body)

    def _take_id(self) -> int:
        event_id, self._next_id = self._next_id, self._next_id + 1
        return event_id

    def opening(self) -> list[bytes]:
        """Chat: one role chunk per choice; completions start with their text."""
        if self.kind != "chat":
            return []
        return [self.role_of(self._take_id(), index) for index in range(self.choices)]

    def progress(self, taken: Taken) -> list[bytes]:
        """Each choice's new output as one chunk, then its finish chunk if it ended."""
        if self._next_id == 0 and self.kind != "chat":
            self._next_id = 1  # completions number their events from 1, like chat after role
        events: list[bytes] = []
        for part in taken.parts:
            if part.plain:
                if part.text:
                    events.append(self.text(self._take_id(), part.text))
            else:
                events.append(self.rich(self._take_id(), part))
            if part.finish_reason is not None:
                events.append(self.finish_of(self._take_id(), part.index, part.finish_reason))
        return events

    def closing(self, usage: Usage | None) -> list[bytes]:
        """The usage chunk when the client asked for it, then `[DONE]`."""
        events = []
        if usage is not None:
            events.append(self.usage(self._take_id(), usage.prompt_tokens, usage.completion_tokens))
        return [*events, DONE]

    def failure(self, code: str, message: str) -> list[bytes]:
        """The error event."""
        if self._next_id == 0 and self.kind != "chat":
            self._next_id = 1
        return [self.error(self._take_id(), code, message)]

    def error(self, event_id: int, code: str, message: str) -> bytes:
        """An error event in OpenAI's error shape; the stream ends after it."""
        err = {
            "error": {
                "message": message,
                "type": _error_type(code),
                "param": None,
                "code": code,
            }
        }
        return _event(event_id, _json.encode(err))


def _error_type(code: str) -> str:
    """OpenAI's error `type` for one of the gateway's stream error codes."""
    if code == "engine_rejected":
        return "invalid_request_error"
    return "server_error" if code.startswith("engine") else code


def _event(event_id: int, body: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (event_id, body)
