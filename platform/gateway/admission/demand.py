"""Demand per rank class as the gateway sees it: the signal engine autoscaling reads.

The gate holds requests for a place under each engine's in-flight cap and sheds the excess
itself, so SGLang's own queue (`sglang:num_queue_reqs`) stays short however much more a
rank class is asked for, and an autoscaler reading it never scales out. These series count
what the gate sees instead: requests in flight and waiting, admitted and shed, and first
tokens against their engine's TTFT target, each labelled by rank class (an engine's
`max_lora_rank`: a handful of values), never by adapter or tenant.

A class's series are declared at zero as soon as an engine of that class is registered,
so a Prometheus that scrapes this process reads 0, not nothing, for a class with no demand:
an autoscaler can then tell "no demand" from "no data" (docs/observability.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from loraplex.gateway.resolve import Target
from loraplex.observability.metrics import (
    RANK_CLASS_ADMITTED,
    RANK_CLASS_IN_FLIGHT,
    RANK_CLASS_SHED,
    RANK_CLASS_TTFT,
    RANK_CLASS_TTFT_OVER_TARGET,
    RANK_CLASS_WAITING,
)
from loraplex.serving.registry import EngineHandle

NO_CLASS = "none"  # no registered engine serves the base model at the adapter's rank
# The gate's load-shedding reasons (`Overloaded.reason`), declared at zero per class.
SHED_REASONS = ("engine_busy", "waited_too_long", "overload")


class EngineList(Protocol):
    """The registry's view this module needs."""

    def all(self) -> list[EngineHandle]: ...


def rank_class_of(engines: list[EngineHandle], target: Target) -> str:
    """The rank class a request for `target` runs in: the smallest class among the engines
    serving its base model that fits its adapter's rank, as placement chooses, healthy or
    not (a class whose engines are all down still has the demand); NO_CLASS if none fits."""
    rank = target.rank or 0
    fits = [
        e.max_lora_rank
        for e in engines
        if e.base_model == target.base_model and e.max_lora_rank >= rank
    ]
    return str(min(fits)) if fits else NO_CLASS


class RankClassDemand:
    """Keeps the per-rank-class series of one gate."""

    def __init__(self, registry: EngineList) -> None:
        self.registry = registry
        self._declared: set[str] = set()
        self.declare_registered()

    def class_of(self, target: Target) -> str:
        """The rank class of a request for `target` (declaring any class newly registered)."""
        engines = self.registry.all()
        self._declare(str(e.max_lora_rank) for e in engines)
        return rank_class_of(engines, target)

    def declare_registered(self) -> None:
        """Put every registered engine's class on the metrics at zero."""
        self._declare(str(e.max_lora_rank) for e in self.registry.all())

    def _declare(self, classes: Iterator[str] | list[str]) -> None:
        for rank_class in classes:
            if rank_class in self._declared:
                continue
            self._declared.add(rank_class)
            RANK_CLASS_IN_FLIGHT.labels(rank_class)
            RANK_CLASS_WAITING.labels(rank_class)
            RANK_CLASS_ADMITTED.labels(rank_class)
            RANK_CLASS_TTFT_OVER_TARGET.labels(rank_class)
            for reason in SHED_REASONS:
                RANK_CLASS_SHED.labels(rank_class, reason)

    @contextlib.contextmanager
    def waiting(self, rank_class: str) -> Iterator[None]:
        """A request of `rank_class` waits at the gate for the duration."""
        gauge = RANK_CLASS_WAITING.labels(rank_class)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def entered(self, rank_class: str) -> None:
        """A request of `rank_class` took a place under the caps; in flight until `ended`."""
        RANK_CLASS_IN_FLIGHT.labels(rank_class).inc()

    def admitted(self, rank_class: str) -> None:
        """A request of `rank_class` passed admission, quotas too: one counted as admitted,
        so shed over admitted plus shed is the share of the class's offered load refused."""
        RANK_CLASS_ADMITTED.labels(rank_class).inc()

    def ended(self, rank_class: str) -> None:
        """A request of `rank_class` that `entered` ended (or was refused after all)."""
        RANK_CLASS_IN_FLIGHT.labels(rank_class).dec()

    def shed(self, rank_class: str, reason: str) -> None:
        """A request of `rank_class` was shed for load."""
        RANK_CLASS_SHED.labels(rank_class, reason).inc()

    def first_token(self, rank_class: str, ttft_s: float, target_s: float | None) -> None:
        """A first token of `rank_class`, against its engine's TTFT target (None: unknown)."""
        RANK_CLASS_TTFT.labels(rank_class).observe(ttft_s)
        if target_s is not None and ttft_s > target_s:
            RANK_CLASS_TTFT_OVER_TARGET.labels(rank_class).inc()
