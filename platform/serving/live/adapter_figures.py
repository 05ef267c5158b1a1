"""Per-adapter TTFT and engine-load figures of this process, for the operator's engines page.

A label per adapter on a Prometheus histogram would make a series per adapter and bucket:
with thousands of adapters that is more than a Prometheus server should hold, so /metrics
labels TTFT and load times by rank class only (`loraplex_rank_class_ttft_seconds`,
`loraplex_adapter_load_seconds`) and the per-adapter figures live here: the last
`SAMPLES` first-token times and engine loads of at most `max_adapters` versions, those with
the most requests. A version not kept yet takes the place of the one with the fewest
requests when the table is full, so a steadily busy adapter gets in and stays while the
one-off ones churn among themselves. The figures are this process's (each API replica
shows its own), and start empty at a restart.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DEFAULT_MAX_ADAPTERS = 256
SAMPLES = 200  # recent first tokens kept per adapter: p99 is the 2nd slowest of them
LOAD_SAMPLES = 20  # recent engine loads kept per adapter


def quantile(values: list[float], q: float) -> float | None:
    """The `q` quantile of `values` (nearest rank); None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class AdapterFigure:
    """One version's recent first-token times and engine loads in this process."""

    version_id: str
    requests: int = 0
    engine_loads: int = 0  # loads into an engine's memory
    cold_loads: int = 0  # fetches from the object store onto a node
    ttft_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    load_s: deque[float] = field(default_factory=lambda: deque(maxlen=LOAD_SAMPLES))

    def ttft(self, q: float) -> float | None:
        """The `q` quantile of the recent first-token times (seconds)."""
        return quantile(list(self.ttft_s), q)

    def load(self, q: float) -> float | None:
        """The `q` quantile of the recent engine-load times (seconds)."""
        return quantile(list(self.load_s), q)


class AdapterFigures:
    """The busiest adapter versions' figures, bounded to `max_adapters` entries."""

    def __init__(self, max_adapters: int = DEFAULT_MAX_ADAPTERS) -> None:
        self.max_adapters = max_adapters
        self._figures: dict[str, AdapterFigure] = {}

    def __len__(self) -> int:
        return len(self._figures)

    def first_token(self, version_id: str, ttft_s: float) -> None:
        """A request for the version got its first token after `ttft_s`."""
        figure = self._entry(version_id)
        figure.requests += 1
        figure.ttft_s.append(ttft_s)

    def engine_load(self, version_id: str, seconds: float) -> None:
        """An engine load of the version took `seconds` (with its fetch, when an agent made
        both)."""
        figure = self._entry(version_id)
        figure.engine_loads += 1
        figure.load_s.append(seconds)

    def fetched(self, version_id: str) -> None:
        """The version was fetched from the object store onto a node (a cold load)."""
        self._entry(version_id).cold_loads += 1

    def busiest(self, count: int) -> list[AdapterFigure]:
        """The `count` versions with the most requests, most first."""
        ranked = sorted(self._figures.values(), key=lambda f: (-f.requests, f.version_id))
        return ranked[:count]

    def of(self, version_id: str) -> AdapterFigure | None:
        """The version's figures, if kept."""
        return self._figures.get(version_id)

    def _entry(self, version_id: str) -> AdapterFigure:
        figure = self._figures.get(version_id)
        if figure is None:
            if len(self._figures) >= self.max_adapters:
                quietest = min(self._figures.values(), key=lambda f: f.requests)
                del self._figures[quietest.version_id]
            figure = self._figures[version_id] = AdapterFigure(version_id)
        return figure
