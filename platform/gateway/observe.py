"""Turns how a request ended into Prometheus samples (off the per-token path: once per request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.cpu_cost import CPU_PER_TOKEN
from loraplex.observability import metrics

if TYPE_CHECKING:  # pump imports routing, which records adapter loads here
    from loraplex.gateway.pump import EngineRun

# How a stream's end maps to an HTTP-like status for the request counter.
STATUS_BY_ERROR = {
    "slow_client": 499,
    "client_disconnect": 499,
    "queue_timeout": 504,
    "ttft_timeout": 504,
    "idle_timeout": 504,
    "total_timeout": 504,
    "engine_rejected": 400,
}


def outcome(buffer: StreamBuffer) -> str | None:
    """Why the stream ended early (`None` when it finished)."""
    if buffer.error is not None:
        return buffer.error[0]
    return None if buffer.finish_reason is not None else "client_disconnect"


def record(job: EngineRun, buffer: StreamBuffer, tenant: str, ended_at: float) -> None:
    """Count the request, its tokens and latencies, and the reason it was cut, if it was."""
    reason = outcome(buffer)
    status = 200 if reason is None else STATUS_BY_ERROR.get(reason, 502)
    model = job.target.base_model  # adapter names are unbounded; base models are few
    metrics.observe_request(tenant, model, status, buffer.prompt_tokens, buffer.completion_tokens)
    CPU_PER_TOKEN.add(buffer.completion_tokens)
    if buffer.first_token_at is not None and reason is None:
        metrics.observe_latency(
            model,
            buffer.first_token_at - job.started_at,
            ended_at - job.started_at,
            buffer.completion_tokens,
        )
    if reason is not None:
        metrics.STREAM_ABORTS.labels(reason).inc()
    _record_overhead(job, buffer)


def _record_overhead(job: EngineRun, buffer: StreamBuffer) -> None:
    """The gateway's own phases of this request's TTFT, for those it reached."""
    phases = {}
    if job.received_at is not None:
        phases["admission"] = job.started_at - job.received_at
    if job.engine_sent_at is not None:
        # Time spent on engines that went silent is the engines', not the gateway's.
        phases["routing"] = job.engine_sent_at - job.started_at - job.waited_on_silent_s
    if buffer.first_token_at is not None and buffer.first_relayed_at is not None:
        phases["relay"] = buffer.first_relayed_at - buffer.first_token_at
    for phase, seconds in phases.items():
        metrics.GATEWAY_OVERHEAD_SECONDS.labels(phase).observe(seconds)
    if len(phases) == 3:
        metrics.GATEWAY_OVERHEAD_SECONDS.labels("total").observe(sum(phases.values()))


def adapter_found(tier: str) -> None:
    """Count where a request found its adapter (the loads it caused count where they are
    made: serving/live/runner.py, or `adapter_loaded` below)."""
    metrics.CACHE_HITS.labels(tier).inc()


def adapter_loaded(found: str, rank_class: int, seconds: float) -> None:
    """Count and time the loads one in-process engine load made (the path without placement)."""
    metrics.observe_adapter_load(found, "loaded", str(rank_class), seconds)
