"""Overload admission: measured engine speed in, a shed-or-admit decision out.

The controller only remembers measurements (per engine, exponentially weighted over time)
and applies `policy.decide_shed`; it does no I/O and reads time from an injected clock, so
the simulator can drive it with its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loraplex.gateway.admission.policy import (
    DEFAULT_SHED_MULTIPLES,
    EngineLoad,
    ShedDecision,
    best_estimate_s,
    decide_shed,
)

# A burst of completions at one instant still moves the average, a little each.
MIN_WEIGHT = 0.05


@dataclass
class _Ewma:
    value: float
    at: float


class TimedEwma:
    """An average whose memory is a half-life in seconds, not a number of samples, so a
    quiet engine's few samples count as much as a busy one's many."""

    def __init__(self, half_life_s: float, clock: Callable[[], float]):
        self.half_life_s, self._clock = half_life_s, clock
        self._values: dict[str, _Ewma] = {}

    def observe(self, key: str, sample: float) -> None:
        """Fold one sample into `key`'s average."""
        now = self._clock()
        old = self._values.get(key)
        if old is None:
            self._values[key] = _Ewma(sample, now)
            return
        weight = max(MIN_WEIGHT, 1.0 - 0.5 ** (max(0.0, now - old.at) / self.half_life_s))
        self._values[key] = _Ewma(old.value + weight * (sample - old.value), now)

    def get(self, key: str, default: float) -> float:
        """The current average for `key`, or `default` before its first sample."""
        entry = self._values.get(key)
        return default if entry is None else entry.value


class OverloadShedder:
    """Estimates the TTFT a new request would see and sheds the lowest priority first."""

    def __init__(
        self,
        *,
        budget_s: float,
        multiples: Sequence[float] = DEFAULT_SHED_MULTIPLES,
        half_life_s: float = 30.0,
        default_service_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget_s, self.multiples = budget_s, tuple(multiples)
        self.default_service_s = default_service_s
        self._service = TimedEwma(half_life_s, clock)
        self._prefill = TimedEwma(half_life_s, clock)

    def observe(
        self, engine_id: str, *, service_s: float, prompt_tokens: int = 0, prefill_s: float = 0.0
    ) -> None:
        """Record a finished request: how long it held a slot, and its prefill speed."""
        self._service.observe(engine_id, service_s)
        if prompt_tokens > 0 and prefill_s > 0:
            self._prefill.observe(engine_id, prompt_tokens / prefill_s)

    def load(
        self,
        engine_id: str,
        *,
        in_flight: int,
        queued: int,
        parallelism: int = 1,
        adapter_load_s: float = 0.0,
    ) -> EngineLoad:
        """An engine's current load, with this controller's measurements filled in."""
        return EngineLoad(
            in_flight=in_flight,
            queued=queued,
            service_s=self._service.get(engine_id, self.default_service_s),
            parallelism=parallelism,
            adapter_load_s=adapter_load_s,
            prefill_tokens_per_s=self._prefill.get(engine_id, 0.0),
        )

    def estimate_s(self, loads: Sequence[EngineLoad], prompt_tokens: int) -> float:
        """Estimated TTFT on the best of the candidate engines."""
        return best_estimate_s(loads, prompt_tokens)

    def decide(self, estimate_s: float, priority: int) -> ShedDecision:
        """Admit or shed a request of `priority` facing `estimate_s` of wait."""
        return decide_shed(estimate_s, priority, self.budget_s, self.multiples)
