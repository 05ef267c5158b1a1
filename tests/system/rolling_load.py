"""Steady streaming load for the rolling-restart drill, and what each stream's client saw.

Workers on the client host keep a fixed number of streams open through both API hosts, one
after another, until told to stop. Every finished stream is kept with the times it started
and ended, so the drill can count what was served while an engine was out.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.system.cluster import API_HOSTS, Cluster
from tests.system.conftest import Tenant
from tests.system.drills import CHAT_PATH
from tests.system.engine_streams import chat, outcome, served_by

STREAM = "tokens=20 every=0.05"  # a second of tokens: a roll always has some in flight
STREAM_LIMIT_S = 60.0


@dataclass
class Stream:
    """One stream as its client saw it."""

    api: str
    adapter: str
    started: float
    ended: float
    status: int | None
    outcome: str  # "completed", "error event", "cut without …", or "HTTP <status>"
    engines: set[str]
    ttft_s: float | None

    @property
    def failed(self) -> bool:
        """Not answered with a stream that ran to its end."""
        return self.outcome != "completed"

    @property
    def cut(self) -> bool:
        """Answered 200, then ended without its final event and [DONE]."""
        return self.status == 200 and self.outcome != "completed"


@dataclass
class SteadyLoad:
    """`per_api` concurrent streams through each API host, over `adapters`, until `stop`."""

    cluster: Cluster
    tenant: Tenant
    adapters: list[str]
    per_api: int = 3
    streams: list[Stream] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Open the streams; each worker starts the next one as soon as one ends."""
        picks = itertools.count()
        for api in API_HOSTS:
            for _ in range(self.per_api):
                worker = threading.Thread(target=self._work, args=(api, picks), daemon=True)
                worker.start()
                self._threads.append(worker)

    def stop(self) -> list[Stream]:
        """Let the streams in flight end, start no more; every stream seen."""
        self._stop.set()
        for worker in self._threads:
            worker.join(STREAM_LIMIT_S)
        return list(self.streams)

    def _work(self, api: str, picks: itertools.count[int]) -> None:
        client = self.cluster.client
        assert client is not None
        url = self.cluster.api_url(api) + CHAT_PATH
        while not self._stop.is_set():
            adapter = self.adapters[next(picks) % len(self.adapters)]
            started = time.monotonic()
            future = client.stream(
                url, headers=self.tenant.headers, json=chat(STREAM, adapter),
                timeout=STREAM_LIMIT_S,
            )  # fmt: skip
            result = future.result(STREAM_LIMIT_S + 10)
            with self._lock:
                self.streams.append(as_stream(api, adapter, started, result))


def as_stream(api: str, adapter: str, started: float, result: dict[str, Any]) -> Stream:
    """What one client saw, from the client agent's reply."""
    status = result.get("status")
    seen = outcome(result) if status == 200 else f"HTTP {status}"
    return Stream(
        api, adapter, started, time.monotonic(), status, seen,
        served_by(result) if status == 200 else set(), result.get("first_event_s"),
    )  # fmt: skip
