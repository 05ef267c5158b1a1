"""What the gateway costs per token: the API process's CPU seconds per completion token over
the last minute, published as `loraplex_gateway_cpu_seconds_per_token`.

On a host where the gateway shares cores with an engine, every CPU second the gateway
spends per token is taken from the engine, so this is the figure a regression shows up in
(`loraplex bench gateway` prints the same ratio per load level). The tokens are those of
requests that ended (streamed and not, chat, completions and Responses), counted once per
request; the CPU is the whole process's (`time.process_time`: every thread, user and
system), so it includes admission, routing and the console, not only the relay: on a
gateway that mostly streams, that is what a token costs. Updated once per request at most
once a second, read when scraped.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import Gauge

WINDOW_S = 60.0
SAMPLE_EVERY_S = 1.0


class CpuPerToken:
    """CPU seconds per token between the first and the last of the (time, CPU, tokens)
    samples of the last `window_s`: an idle stretch before them counts for nothing."""

    def __init__(
        self,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ):
        self.window_s, self._clock, self._cpu = window_s, clock, cpu
        self._tokens = 0
        self._samples: deque[tuple[float, float, int]] = deque()

    def add(self, tokens: int) -> None:
        """A request ended having made `tokens` tokens."""
        self._tokens += tokens
        now = self._clock()
        if self._samples and now - self._samples[-1][0] < SAMPLE_EVERY_S:
            return
        self._samples.append((now, self._cpu(), self._tokens))
        while self._samples[0][0] < now - self.window_s:
            self._samples.popleft()

    def value(self) -> float:
        """CPU seconds per token over the window; NaN until it spans two samples with tokens
        between them."""
        if len(self._samples) < 2:
            return math.nan
        (_, cpu_first, tokens_first), (_, cpu_last, tokens_last) = (
            self._samples[0],
            self._samples[-1],
        )
        tokens = tokens_last - tokens_first
        return (cpu_last - cpu_first) / tokens if tokens > 0 else math.nan


CPU_PER_TOKEN = CpuPerToken()
GATEWAY_CPU_SECONDS_PER_TOKEN = Gauge(
    "loraplex_gateway_cpu_seconds_per_token",
    "CPU seconds this API process spent per completion token it served, over the last minute",
)
GATEWAY_CPU_SECONDS_PER_TOKEN.set_function(CPU_PER_TOKEN.value)
