"""The node agent's `/metrics`: what Prometheus learns from the node, not from the API.

The API sees an engine through the network; the agent sees it from beside it: whether its own
probe finds the engine answering, whether a drain is under way, how full the node's adapter
cache is, and how the loads the API asked of it went. Its own registry, so the API's series
(all zero in an agent process) stay out of its page. No series names a tenant or an adapter,
so the page is open like the engine's own `/metrics` (SGLang and vLLM serve theirs openly).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from loraplex.serving.agent_registration import Registrar
    from loraplex.serving.disk_cache import DiskCache

LOAD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class AgentMetrics:
    """The agent's series: counted as loads happen, read from its state at each scrape."""

    def __init__(self, cache: DiskCache, registrar: Registrar | None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.loads = Counter(
            "loraplex_agent_loads",
            "Loads the API asked of this node's engine, by result (ok | error).",
            ["result"],
            registry=self.registry,
        )
        self.load_seconds = Histogram(
            "loraplex_agent_load_seconds",
            "Time from the API's load request to the engine holding the adapter (pull included).",
            buckets=LOAD_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(cache, registrar))

    def timed_load(self) -> _TimedLoad:
        """`with metrics.timed_load():` around one load: counted by result, timed when ok."""
        return _TimedLoad(self)

    def page(self) -> bytes:
        """The Prometheus text page."""
        return generate_latest(self.registry)


class _TimedLoad:
    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics, self.started = metrics, 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, kind: object, *_: object) -> None:
        self.metrics.loads.labels("error" if kind is not None else "ok").inc()
        if kind is None:
            self.metrics.load_seconds.observe(time.perf_counter() - self.started)


class _StateCollector(Collector):
    """Gauges read at scrape time from the cache and the registrar."""

    def __init__(self, cache: DiskCache, registrar: Registrar | None) -> None:
        self.cache, self.registrar = cache, registrar

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield _gauge("loraplex_agent_cache_bytes", "Bytes the node's adapter cache holds.",
                     self.cache.used_bytes)  # fmt: skip
        yield _gauge("loraplex_agent_cache_budget_bytes", "The node's adapter cache budget.",
                     self.cache.budget_bytes)  # fmt: skip
        if self.registrar is None:
            return
        up = self.registrar.engine_up
        if up is not None:  # not probed yet: no sample rather than a wrong one
            help_text = "1 while the agent's probe finds its engine answering."
            yield _gauge("loraplex_agent_engine_up", help_text, int(up))
        yield _gauge("loraplex_agent_draining", "1 while a drain of this node's engine runs.",
                     int(self.registrar.draining))  # fmt: skip
        yield _gauge("loraplex_agent_registered", "1 while the API has taken the engine.",
                     int(self.registrar.registered))  # fmt: skip


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    family.add_metric([], value)
    return family
