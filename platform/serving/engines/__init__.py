"""Inference engine drivers (vLLM, SGLang) behind one protocol, and the CPU engine launcher."""

from __future__ import annotations

from typing import Any

from loraplex.serving.engines.http_driver import DriverTimeouts
from loraplex.serving.engines.protocol import (
    ABORTED,
    AdapterNotLoaded,
    EngineDied,
    EngineDriver,
    EngineError,
    EngineGauges,
    EngineHealth,
    EngineLoad,
    EngineRejected,
    EngineUnavailable,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
)
from loraplex.serving.engines.sglang import SglangDriver
from loraplex.serving.engines.vllm import VllmDriver

__all__ = [
    "ABORTED",
    "AdapterNotLoaded",
    "DriverTimeouts",
    "EngineDied",
    "EngineDriver",
    "EngineError",
    "EngineGauges",
    "EngineHealth",
    "EngineLoad",
    "EngineRejected",
    "EngineUnavailable",
    "GenerateChunk",
    "GenerateOptions",
    "GenerateRequest",
    "SglangDriver",
    "VllmDriver",
    "make_driver",
]

DRIVERS: dict[str, type[VllmDriver] | type[SglangDriver]] = {
    "vllm": VllmDriver,
    "sglang": SglangDriver,
}


def make_driver(kind: str, url: str, **options: Any) -> EngineDriver:
    """The driver for an engine of `kind` ("vllm" | "sglang") at `url`."""
    try:
        driver_class = DRIVERS[kind]
    except KeyError:
        raise ValueError(f"unknown engine kind {kind!r}; known: {sorted(DRIVERS)}") from None
    return driver_class(url, **options)
