"""Reading an engine's own Prometheus figures, whichever kind it is (test helpers)."""

from __future__ import annotations

import time
from collections.abc import Iterable

import httpx

from loraplex.serving.engines.sglang import SGLANG_GAUGES
from loraplex.serving.engines.vllm import VLLM_GAUGES
from tests.support.engine import RunningEngine

GAUGES = {"sglang": SGLANG_GAUGES, "vllm": VLLM_GAUGES}
PROMPT_TOKENS = {"sglang": "sglang:prompt_tokens_total", "vllm": "vllm:prompt_tokens_total"}


def _sample(engine: RunningEngine, name: str) -> float:
    text = httpx.get(f"{engine.url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def _busy(engine: RunningEngine) -> float:
    if engine.kind == "sglang":  # its /metrics gauges lag a starting request: ask live
        ranks = httpx.get(f"{engine.url}/v1/loads", timeout=5).json()["loads"]
        return sum(rank["num_running_reqs"] + rank["num_waiting_reqs"] for rank in ranks)
    gauges = GAUGES[engine.kind]
    return _sample(engine, gauges.running) + _sample(engine, gauges.waiting)


def engine_running(engines: Iterable[RunningEngine]) -> float:
    """Requests the engines are running or queueing now, summed."""
    return sum(_busy(engine) for engine in engines)


def prompt_tokens(engines: Iterable[RunningEngine]) -> float:
    """Prompt tokens the engines have processed since they started, summed."""
    return sum(_sample(engine, PROMPT_TOKENS[engine.kind]) for engine in engines)


def wait_until_busy(engines: Iterable[RunningEngine], timeout_s: float) -> bool:
    """Whether the engines run something within `timeout_s` (their gauges may lag a step)."""
    engines = tuple(engines)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine_running(engines) >= 1:
            return True
        time.sleep(0.05)
    return False


def wait_until_idle(engines: Iterable[RunningEngine], timeout_s: float) -> float | None:
    """Seconds until the engines run nothing, or None if they still do after `timeout_s`."""
    engines = tuple(engines)
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if engine_running(engines) == 0:
            return time.monotonic() - started
        time.sleep(0.05)
    return None
