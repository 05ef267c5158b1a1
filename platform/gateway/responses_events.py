"""OpenAI's Responses API streams: the typed events of one reply, as SSE bytes.

`ResponsesEncoder` is the stream's `EventEncoder` (`relay.encode_events` drives it); one
reply's events are

    response.created, response.in_progress
    for each output item, in output order:
        message:       response.output_item.added, response.content_part.added,
                       response.output_text.delta ..., response.output_text.done,
                       response.content_part.done, response.output_item.done
        function_call: response.output_item.added, response.function_call_arguments.delta ...,
                       response.function_call_arguments.done, response.output_item.done
    response.completed: the whole response, with usage (response.incomplete when the output
    was cut at max_output_tokens; response.failed instead, when the engine failed)

each with its `type` and a `sequence_number` counting from 0, written as OpenAI does:
`event: <type>` then `data: <json>`. A message is closed when a function call starts;
whatever is still open closes at the finish, in output order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from loraplex.gateway.buffer import Taken, ToolCallDelta
from loraplex.gateway.responses_body import (
    call_ids,
    call_item,
    entries_of,
    event_logprobs,
    message_id,
    message_item,
    output_text,
    response_object,
    status_of,
    usage_of,
)
from loraplex.gateway.sse import Usage

_json = msgspec.json.Encoder()


@dataclass
class _Message:
    """A message item of the stream: where it is, its delta events' fixed prefix, its text."""

    output_index: int
    item_id: str
    delta_head: bytes
    texts: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    status: str | None = None  # set when it is closed

    def item(self, status: str) -> dict[str, Any]:
        return message_item(self.item_id, status, [output_text("".join(self.texts), self.logprobs)])


@dataclass
class _Call:
    """A function_call item of the stream."""

    output_index: int
    item_id: str
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    status: str | None = None

    def item(self, status: str) -> dict[str, Any]:
        return call_item(self.item_id, self.call_id, self.name, "".join(self.arguments), status)


class ResponsesEncoder:
    """Encodes one streamed Response's events (one choice), numbering them from 0."""

    def __init__(
        self, response_id: str, model: str, echo: dict[str, Any], created_at: int | None = None
    ):
        self.response_id, self.model, self.echo = response_id, model, echo
        self.created_at = created_at if created_at is not None else int(time.time())
        self._sequence = 0
        self._items: list[_Message | _Call] = []
        self._message: _Message | None = None  # the open message new text goes to
        self._calls: dict[int, _Call] = {}  # by the engine's tool-call index
        self._messages = 0
        self._finish: str | None = None

    def opening(self) -> list[bytes]:
        """`response.created` and `response.in_progress`, with no output yet."""
        snapshot = self._response("in_progress", [])
        return [
            self._event("response.created", {"response": snapshot}),
            self._event("response.in_progress", {"response": snapshot}),
        ]

    def progress(self, taken: Taken) -> list[bytes]:
        """The new text and function-call arguments; every open item closes at the finish."""
        events: list[bytes] = []
        for part in taken.parts:
            if part.index != 0:
                continue  # one choice: the Responses API has no `n`
            if part.text or part.logprobs:
                events += self._text(part.text, entries_of(part.logprobs))
            for call in part.tool_calls or []:
                events += self._call(call)
            if part.finish_reason is not None:
                self._finish = part.finish_reason
                events += self._close_all()
        return events

    def closing(self, usage: Usage | None) -> list[bytes]:
        """`response.completed` (or `.incomplete`) with the whole output and the usage."""
        events = self._close_all()
        status, details = status_of(self._finish)
        counts = usage_of(usage.prompt_tokens, usage.completion_tokens) if usage else None
        response = self._response(status, self._output(), usage=counts, incomplete_details=details)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, {"response": response})]

    def failure(self, code: str, message: str) -> list[bytes]:
        """`response.failed`: the output so far, unfinished items incomplete, and why."""
        error = {"code": "server_error", "message": message, "type": code}
        response = self._response("failed", self._output(), error=error)
        return [self._event("response.failed", {"response": response})]

    def _text(self, text: str, logprobs: list[dict[str, Any]]) -> list[bytes]:
        events = [] if self._message is not None else self._open_message()
        message = self._message
        assert message is not None
        message.texts.append(text)
        message.logprobs += logprobs
        marks = _json.encode(event_logprobs(logprobs)) if logprobs else b"[]"
        body = b'%s,"logprobs":%s,"sequence_number":%d}\n\n' % (
            _json.encode(text),
            marks,
            self._next(),
        )
        return [*events, message.delta_head + body]

    def _open_message(self) -> list[bytes]:
        index = len(self._items)
        item_id = message_id(self.response_id, self._messages)
        self._messages += 1
        head = (
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
            b'"item_id":%s,"output_index":%d,"content_index":0,"delta":'
            % (_json.encode(item_id), index)
        )
        self._message = _Message(index, item_id, head)
        self._items.append(self._message)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self._event(
                "response.output_item.added",
                {"output_index": index, "item": message_item(item_id, "in_progress", [])},
            ),
            self._event("response.content_part.added", {**where, "part": output_text("", [])}),
        ]

    def _call(self, delta: ToolCallDelta) -> list[bytes]:
        function = delta.get("function") or {}
        call = self._calls.get(delta.get("index", 0))
        events: list[bytes] = []
        if call is None:
            if self._message is not None:  # the text before a call is a finished message
                events += self._close(self._message, "completed")
                self._message = None
            item_id, call_id = call_ids(self.response_id, delta)
            call = _Call(len(self._items), item_id, call_id, function.get("name") or "")
            self._items.append(call)
            self._calls[delta.get("index", 0)] = call
            added = {"output_index": call.output_index, "item": call.item("in_progress")}
            events.append(self._event("response.output_item.added", added))
        elif function.get("name") and not call.name:
            call.name = function["name"]
        if function.get("arguments"):
            call.arguments.append(function["arguments"])
            where = {"item_id": call.item_id, "output_index": call.output_index}
            delta_event = {**where, "delta": function["arguments"]}
            events.append(self._event("response.function_call_arguments.delta", delta_event))
        return events

    def _close_all(self) -> list[bytes]:
        """Close every open item, in output order (an empty message if there was none)."""
        events = [] if self._items else self._open_message()
        status = "completed" if status_of(self._finish)[0] == "completed" else "incomplete"
        for item in self._items:
            events += self._close(item, status)
        self._message = None
        return events

    def _close(self, item: _Message | _Call, status: str) -> list[bytes]:
        if item.status is not None:
            return []
        item.status = status
        where = {"item_id": item.item_id, "output_index": item.output_index}
        done = {"output_index": item.output_index, "item": item.item(status)}
        if isinstance(item, _Call):
            arguments = {**where, "arguments": "".join(item.arguments)}
            return [
                self._event("response.function_call_arguments.done", arguments),
                self._event("response.output_item.done", done),
            ]
        text, part = "".join(item.texts), {**where, "content_index": 0}
        return [
            self._event(
                "response.output_text.done",
                {**part, "text": text, "logprobs": event_logprobs(item.logprobs)},
            ),
            self._event(
                "response.content_part.done", {**part, "part": output_text(text, item.logprobs)}
            ),
            self._event("response.output_item.done", done),
        ]

    def _output(self) -> list[dict[str, Any]]:
        return [item.item(item.status or "incomplete") for item in self._items]

    def _response(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return response_object(
            self.response_id,
            self.model,
            self.echo,
            created_at=self.created_at,
            status=status,
            output=output,
            **extra,
        )

    def _next(self) -> int:
        number, self._sequence = self._sequence, self._sequence + 1
        return number

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        body = _json.encode({"type": kind, **payload, "sequence_number": self._next()})
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), body)
