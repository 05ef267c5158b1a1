"""The in-flight cap of one engine, adapted to what the engine shows: no tuning needed.

A CPU engine (vLLM, SGLang with a large batch) runs every request it is sent at once, so
its TTFT grows with concurrency instead of with a queue; a GPU engine with fixed batch slots
queues past them. Either way the right number of requests in flight depends on the model,
the prompts, the hardware and what else runs there. This cap finds it by additive increase,
multiplicative decrease (AIMD), the way TCP finds a link's window:

- **The SLO** is an explicit TTFT (`engine_ttft_slo_s`) or, by default, `IDLE_MULTIPLE` x the
  TTFT the engine gives a request that finds nothing else running (the `IDLE_QUANTILE` of
  the last `IDLE_SAMPLES` such requests, so the engine's own jitter is inside the
  reference; until the first one, the fastest TTFT seen so far stands in). A prompt longer
  than the idle requests' average gets a proportionally longer allowance: prefill grows
  with the prompt, and a long prompt is not a sign of overload.
- **Increase**: a request that met the SLO while the cap (nearly) bound raises it: by one
  until the first cut (slow start: the cap doubles each round, so a burst finds its level
  in a few rounds), then by `1 / cap` (about one per cap's worth of requests served in
  time). Only while the cap binds: an idle engine's cap does not drift up unseen.
- **Decrease**: when a request is over the SLO and so are more than `CUT_SHARE` of the
  last `WINDOW` requests (one slow request is jitter; a quarter of them is load), the cap
  is cut by `BACKOFF`. Only a request admitted after the last cut can cut again, so one
  burst of slow requests (all admitted under the old cap) cuts once. The engine reporting
  requests waiting in its own queue (it cannot batch more) cuts the cap to what it runs,
  at most once per `QUEUE_CUT_EVERY_S`.
- Bounds: the cap starts at `seed` (the gate passes the requests an engine runs at full
  speed, `admission_parallelism`, or its batch slots if more), never falls below `floor`
  and never rises above `ceiling` (the fixed `engine_max_in_flight` when it is set).

Pure: time comes in as arguments; the gate feeds it and the engines page shows `value`.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

IDLE_MULTIPLE = 2.0  # default SLO: twice the TTFT of a request on an idle engine
IDLE_SAMPLES = 32
IDLE_QUANTILE = 0.9
WINDOW = 16  # the recent requests a cut looks at
CUT_SHARE = 0.25
BACKOFF = 0.8  # a cut keeps 80% of the cap
DEFAULT_CEILING = 256  # no fixed cap set: the adaptive one stops here
QUEUE_CUT_EVERY_S = 1.0


@dataclass
class AdaptiveCap:
    """One engine's cap: AIMD on TTFT against an SLO, and on the engine's own queue."""

    seed: int
    ceiling: int = DEFAULT_CEILING
    floor: int = 1
    slo_s: float = 0.0  # 0: learned, IDLE_MULTIPLE x the idle TTFT
    limit: float = field(init=False)
    idle_ttft_s: float | None = field(default=None, init=False)  # the idle reference
    idle_prompt_tokens: float = field(default=0.0, init=False)  # their mean prompt
    fastest_ttft_s: float = field(default=math.inf, init=False)
    _idle: deque[tuple[float, int]] = field(init=False, repr=False)
    _recent_over: deque[bool] = field(init=False, repr=False)
    last_cut_at: float = field(default=-math.inf, init=False)
    cuts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.ceiling = max(1, self.ceiling)
        self.floor = min(max(1, self.floor), self.ceiling)
        self.limit = float(min(max(self.floor, self.seed), self.ceiling))
        self._idle = deque(maxlen=IDLE_SAMPLES)
        self._recent_over = deque(maxlen=WINDOW)

    @property
    def value(self) -> int:
        """Requests this engine may have in flight now."""
        return max(1, int(self.limit))

    def target_s(self, prompt_tokens: int = 0) -> float | None:
        """The TTFT a request of `prompt_tokens` should get; None until there is anything
        to go by."""
        if self.slo_s > 0:
            return self.slo_s
        base = self.idle_ttft_s if self.idle_ttft_s is not None else self.fastest_ttft_s
        if math.isinf(base):
            return None
        longer = prompt_tokens / self.idle_prompt_tokens if self.idle_prompt_tokens > 0 else 1.0
        return IDLE_MULTIPLE * base * max(1.0, longer)

    def on_first_token(
        self,
        ttft_s: float,
        *,
        admitted_at: float,
        idle: bool,
        at_cap: bool,
        now: float,
        prompt_tokens: int = 0,
    ) -> None:
        """A request admitted at `admitted_at` got its first token `ttft_s` later; it is `now`.

        `idle`: nothing else was running when it was admitted; `at_cap`: the cap (nearly)
        bound then, so meeting the SLO says the cap could be higher.
        """
        self._learn_idle(ttft_s, idle, prompt_tokens)
        target = self.target_s(prompt_tokens)
        if target is None:
            return
        over = ttft_s > target
        self._recent_over.append(over)
        if over:
            loaded = sum(self._recent_over) > CUT_SHARE * WINDOW
            if loaded and admitted_at > self.last_cut_at:  # else admitted before the cut
                self._cut(self.limit * BACKOFF, now)
        elif at_cap:
            step = 1.0 if self.cuts == 0 else 1.0 / self.limit
            self.limit = min(float(self.ceiling), self.limit + step)

    def on_engine_queue(self, waiting: float, now: float, *, running: int) -> None:
        """The engine reports `waiting` requests it has not started: more than it can batch.

        Cut to what it runs (at most `BACKOFF` x the cap), once per `QUEUE_CUT_EVERY_S`.
        """
        if waiting > 0 and now - self.last_cut_at >= QUEUE_CUT_EVERY_S:
            self._cut(min(self.limit * BACKOFF, float(running)), now)

    def _learn_idle(self, ttft_s: float, idle: bool, prompt_tokens: int) -> None:
        self.fastest_ttft_s = min(self.fastest_ttft_s, ttft_s)
        if not idle:
            return
        self._idle.append((ttft_s, prompt_tokens))
        times = sorted(t for t, _ in self._idle)
        self.idle_ttft_s = times[min(len(times) - 1, int(IDLE_QUANTILE * len(times)))]
        self.idle_prompt_tokens = statistics.fmean(p for _, p in self._idle)

    def _cut(self, to: float, now: float) -> None:
        self.limit = max(float(self.floor), to)
        self.last_cut_at, self.cuts = now, self.cuts + 1
        self._recent_over.clear()  # the next cut waits for requests admitted under this cap
