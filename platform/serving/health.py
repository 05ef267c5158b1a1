"""Pure health decisions for the engine poller: when an engine leaves and rejoins rotation.

No I/O and no clock of its own: the poller feeds probe outcomes and timestamps in, so the
rules are unit-tested without engines, sleeps or a database.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Transition(enum.StrEnum):
    """A change of an engine's rotation state worth acting on (and writing down)."""

    UP = "up"  # back in rotation (or in for the first time)
    DOWN = "down"  # out of rotation


@dataclass(frozen=True, slots=True)
class HealthRule:
    """How many probe outcomes in a row flip an engine's state."""

    # One failed probe is often a GC pause or a busy event loop on the engine; taking the
    # engine out on it would shuffle placement for nothing. Two in a row (4 s at the default
    # 2 s interval) is a real outage. Coming back needs only one success: the poller has just
    # re-read the engine's adapter list, so routing to it again is safe.
    failures_to_unhealthy: int = 2
    successes_to_healthy: int = 1

    def __post_init__(self) -> None:
        """Both thresholds must be at least one probe."""
        if self.failures_to_unhealthy < 1 or self.successes_to_healthy < 1:
            raise ValueError("health thresholds must be >= 1")


class HealthTracker:
    """One engine's rotation state, driven by probe outcomes.

    An engine starts `unknown`: out of rotation until its first success, and its first
    failure takes it down at once (there is no good record to give it the benefit of doubt).
    """

    def __init__(self, rule: HealthRule | None = None) -> None:
        self.rule = rule or HealthRule()
        self.healthy = False
        self.known = False
        self.failures_in_a_row = 0
        self.successes_in_a_row = 0

    def observe(self, ok: bool) -> Transition | None:
        """Record one probe outcome; return the transition it causes, if any."""
        if ok:
            self.successes_in_a_row += 1
            self.failures_in_a_row = 0
            if not self.healthy and self.successes_in_a_row >= self.rule.successes_to_healthy:
                return self._become(healthy=True)
        else:
            self.failures_in_a_row += 1
            self.successes_in_a_row = 0
            if not self.known or (
                self.healthy and self.failures_in_a_row >= self.rule.failures_to_unhealthy
            ):
                return self._become(healthy=False)
        return None

    def force_down(self) -> Transition | None:
        """Take the engine out now (the gateway saw it fail a request); a probe brings it back."""
        self.failures_in_a_row = max(self.failures_in_a_row, self.rule.failures_to_unhealthy)
        self.successes_in_a_row = 0
        if self.healthy or not self.known:
            return self._become(healthy=False)
        return None

    def _become(self, *, healthy: bool) -> Transition:
        self.healthy = healthy
        self.known = True
        return Transition.UP if healthy else Transition.DOWN


class HeartbeatSchedule:
    """At most one heartbeat write per engine per `every_s`: the DB is not a metrics store."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self._last_written: dict[str, float] = {}

    def due(self, engine_id: str, now: float) -> bool:
        """Whether a heartbeat for `engine_id` should be written at `now`."""
        last = self._last_written.get(engine_id)
        return last is None or now - last >= self.every_s

    def written(self, engine_id: str, now: float) -> None:
        """Note that a heartbeat (or a state change carrying one) was written at `now`."""
        self._last_written[engine_id] = now

    def forget(self, engine_id: str) -> None:
        """Drop an engine that left the registry."""
        self._last_written.pop(engine_id, None)
