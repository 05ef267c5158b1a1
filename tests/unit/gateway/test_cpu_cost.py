"""`loraplex_gateway_cpu_seconds_per_token` (gateway/cpu_cost.py): the process's CPU per token
over the last minute of requests, an idle stretch before them left out."""

from __future__ import annotations

import math

from prometheus_client import REGISTRY

from loraplex.gateway.cpu_cost import CpuPerToken


class Clocks:
    """Wall time and CPU time the test moves by hand."""

    def __init__(self) -> None:
        self.now, self.cpu = 1000.0, 50.0

    def spend(self, seconds: float, cpu_s: float) -> None:
        self.now += seconds
        self.cpu += cpu_s


def _meter(clocks: Clocks) -> CpuPerToken:
    return CpuPerToken(window_s=60.0, clock=lambda: clocks.now, cpu=lambda: clocks.cpu)


def test_cpu_per_token_is_the_cpu_spent_between_requests_over_their_tokens() -> None:
    clocks = Clocks()
    meter = _meter(clocks)
    assert math.isnan(meter.value())  # nothing served yet
    meter.add(100)
    for _ in range(10):
        clocks.spend(2.0, cpu_s=0.004)  # 40 µs per token
        meter.add(100)
    assert math.isclose(meter.value(), 40e-6)


def test_a_cheaper_minute_replaces_a_costly_one_and_idle_time_is_not_counted() -> None:
    clocks = Clocks()
    meter = _meter(clocks)
    meter.add(100)
    for _ in range(30):
        clocks.spend(2.0, cpu_s=0.02)  # 200 µs per token
        meter.add(100)
    clocks.spend(600.0, cpu_s=30.0)  # ten idle minutes of pollers and the console
    meter.add(100)
    assert math.isnan(meter.value())  # one sample after the gap: no span yet
    for _ in range(30):
        clocks.spend(2.0, cpu_s=0.002)  # 20 µs per token
        meter.add(100)
    assert math.isclose(meter.value(), 20e-6)


def test_the_gauge_is_published_under_its_name() -> None:
    names = {metric.name for metric in REGISTRY.collect()}
    assert "loraplex_gateway_cpu_seconds_per_token" in names
