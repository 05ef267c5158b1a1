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
# vLLM refreshes its running/waiting gauges only when its engine core steps, so after an
# abort that empties it they may keep the old count until the next request (vllm #29928).
# Its generated-token counter moves on every step that runs a request: when it has stood
# still this long (dozens of steps at this host's pace) nothing is running.
VLLM_GENERATED = "vllm:generation_tokens_total"
QUIET_S = 0.5


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
    """Seconds until the engines run nothing, or None if they still do after `timeout_s`.

    A vLLM engine whose gauges still count requests is idle too once its generated tokens
    have stood still for QUIET_S (its gauges can be stale after an abort, see above).
    """
    engines = tuple(engines)
    started = time.monotonic()
    generated: dict[str, tuple[float, float]] = {}  # url -> (tokens, when they last moved)
    while time.monotonic() - started < timeout_s:
        now = time.monotonic()
        if all(_idle(engine, generated, now) for engine in engines):
            return now - started
        time.sleep(0.05)
    return None


def _idle(engine: RunningEngine, generated: dict[str, tuple[float, float]], now: float) -> bool:
    if _busy(engine) == 0:
        return True
    if engine.kind != "vllm":
        return False
    tokens = _sample(engine, VLLM_GENERATED)
    seen, moved_at = generated.get(engine.url, (None, now))
    if tokens != seen:
        generated[engine.url] = (tokens, now)
        return False
    return now - moved_at >= QUIET_S
