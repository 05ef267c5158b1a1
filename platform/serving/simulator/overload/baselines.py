"""The admission policies the new core is compared with: none, a fixed cap, and an oracle
that knows each request's service time. Each takes the core's events and answers with its
decisions, so the simulator drives them all alike."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from loraplex.gateway.admission.core import (
    Admit,
    Arrival,
    Decision,
    Event,
    Finished,
    FirstToken,
    Shed,
    Tick,
    Wait,
)


class NoAdmission:
    """Every request goes to the engine at once."""

    def handle(self, event: Event) -> list[Decision]:
        """Admit every arrival; nothing else to decide."""
        return [Admit(event.request_id, event.at)] if isinstance(event, Arrival) else []


class FixedCap:
    """At most `cap` in flight; a request that finds it full waits `wait_s`, oldest first,
    then is shed (`LORAPLEX_ENGINE_ADAPTIVE_CAP=false` with a fixed
    `LORAPLEX_ENGINE_MAX_IN_FLIGHT`)."""

    def __init__(self, cap: int, wait_s: float = 0.005) -> None:
        self.cap, self.wait_s = cap, wait_s
        self._in_flight: set[str] = set()
        self._queue: deque[tuple[str, float]] = deque()

    def handle(self, event: Event) -> list[Decision]:
        """Admit under the cap, queue briefly over it, shed after the wait."""
        if isinstance(event, Arrival):
            if len(self._in_flight) < self.cap and not self._queue:
                self._in_flight.add(event.request_id)
                return [Admit(event.request_id, event.at)]
            self._queue.append((event.request_id, event.at + self.wait_s))
            return [Wait(event.request_id, event.at + self.wait_s)]
        if isinstance(event, Finished):
            self._in_flight.discard(event.request_id)
            decisions: list[Decision] = []
            while self._queue and len(self._in_flight) < self.cap:
                rid, _ = self._queue.popleft()
                self._in_flight.add(rid)
                decisions.append(Admit(rid, event.at))
            return decisions
        if isinstance(event, Tick):
            shed: list[Decision] = []
            while self._queue and self._queue[0][1] <= event.at:
                shed.append(Shed(self._queue.popleft()[0], "waited_too_long", 1.0))
            return shed
        return []


class Oracle:
    """Knows what the engine model will do: admits a request only if the TTFT it will get,
    predicted from the profile for the batch it joins (`predict_ttft_s` of the prompts
    still waiting for a first token, the requests in flight and its own prompt), meets its
    SLO; sheds it on arrival otherwise, having waited for nothing. A baseline to compare
    with, not a bound: it sees neither the arrivals to come nor the steps they will add."""

    def __init__(
        self,
        predict_ttft_s: Callable[[list[int], int, int], float],
        slo_s: Callable[[int], float],
    ) -> None:
        self._predict, self._slo = predict_ttft_s, slo_s
        self._in_flight: set[str] = set()
        self._prefilling: dict[str, int] = {}  # request -> its prompt tokens

    def handle(self, event: Event) -> list[Decision]:
        """Admit where the predicted TTFT meets the SLO, else shed at once."""
        if isinstance(event, Arrival):
            prompts = list(self._prefilling.values())
            running = len(self._in_flight) - len(prompts)
            ttft = self._predict(prompts, running, event.prompt_tokens)
            if ttft > self._slo(event.prompt_tokens):
                return [Shed(event.request_id, "would_miss_slo", 1.0)]
            self._in_flight.add(event.request_id)
            self._prefilling[event.request_id] = event.prompt_tokens
            return [Admit(event.request_id, event.at)]
        if isinstance(event, FirstToken):
            self._prefilling.pop(event.request_id, None)
        elif isinstance(event, Finished):
            self._in_flight.discard(event.request_id)
            self._prefilling.pop(event.request_id, None)
        return []
