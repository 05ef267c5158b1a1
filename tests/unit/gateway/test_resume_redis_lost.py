"""A reader of a resumable stream whose Redis goes away gets an error event, not a cut
connection (found by the Redis drill in tests/system)."""

from __future__ import annotations

import json
from typing import Any

from loraplex.gateway.resume import ResumableStreams


class RedisThatDiesAfterOneRead:
    """Enough of redis.asyncio for a reader: one event, then the connection is gone."""

    def __init__(self) -> None:
        self.reads = 0

    async def set(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def get(self, key: str) -> bytes:
        return b"tenant-1"

    async def xread(self, streams: dict[str, str], **kwargs: Any) -> Any:
        self.reads += 1
        if self.reads > 1:
            raise ConnectionError("Connection closed by server.")
        return [(b"lpx:sse:c", [(b"1-0", {b"e": b"id: 0\ndata: {}\n\n"})])]


async def test_a_reader_whose_redis_goes_away_ends_with_an_error_event() -> None:
    streams = ResumableStreams(RedisThatDiesAfterOneRead(), window_s=1.0, heartbeat_s=0.5)

    events = [event async for event in await streams.read("chatcmpl-c", "tenant-1", None)]

    assert events[0] == b"id: 0\ndata: {}\n\n"
    error = json.loads(events[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "stream_lost" and "chatcmpl-c" in error["message"]
    assert "Connection" not in error["message"]
