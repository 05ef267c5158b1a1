"""Replay a bench trace open-loop against one way of serving it, recording each answer.

Requests leave at the trace's arrival times whatever the earlier ones are doing (an open
loop: a slow way builds a queue instead of slowing the load down). Each one streams; its
TTFT is the first chunk with text, its E2E the end of the stream, and its text is kept so
the answer can be compared with PEFT's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import msgspec

from loraplex.bench.adapters_trace import BenchRequest
from loraplex.serving.engines.http_driver import iter_sse_data

# A request's headers and body, as one way sends it.
SendFor = Callable[[BenchRequest], tuple[dict[str, str], dict[str, Any]]]


@dataclass(slots=True)
class Answer:
    """What one request saw."""

    adapter: int
    question: str
    long: bool
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    tokens: int = 0
    text: str = ""
    error: str = ""  # "" when it completed; else the status or the failure's kind

    @property
    def ok(self) -> bool:
        """Whether it completed with an answer."""
        return not self.error


async def _one(
    client: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    out: Answer,
) -> None:
    started = time.perf_counter()
    parts: list[str] = []
    try:
        async with client.post(url, json=body, headers=headers) as response:
            if response.status != 200:
                out.error = str(response.status)
                return
            async for data in iter_sse_data(response.content.iter_any()):
                if data == b"[DONE]":  # read on to the body's end: the connection is reused
                    continue
                event = msgspec.json.decode(data)
                if "error" in event:
                    out.error = "stream error"
                    return
                for choice in event.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or ""
                    if text and out.ttft_s != out.ttft_s:  # NaN: the first text
                        out.ttft_s = time.perf_counter() - started
                    parts.append(text)
                if event.get("usage"):
                    out.tokens = int(event["usage"].get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError, OSError, msgspec.DecodeError) as exc:
        out.error = type(exc).__name__
        return
    out.e2e_s = time.perf_counter() - started
    if out.ttft_s != out.ttft_s:
        out.ttft_s = out.e2e_s
    out.text = "".join(parts)


async def replay(
    url: str, requests: list[BenchRequest], send_for: SendFor
) -> tuple[list[Answer], float]:
    """Send every request at its time; wait for all. Returns the answers in trace order and
    the wall seconds from the first request to the last one's end."""
    answers = [Answer(r.adapter, r.question, r.long) for r in requests]
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        started, tasks = time.perf_counter(), []
        for request, answer in zip(requests, answers, strict=True):
            await asyncio.sleep(max(0.0, started + request.at_s - time.perf_counter()))
            headers, body = send_for(request)
            tasks.append(asyncio.create_task(_one(client, url, headers, body, answer)))
        await asyncio.gather(*tasks)
    return answers, time.perf_counter() - started


def chat_body(model: str, request: BenchRequest, max_tokens: int) -> dict[str, Any]:
    """A greedy streamed chat request for `request` naming `model`."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": request.prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass(frozen=True, slots=True)
class Way:
    """One way of serving the trace: where its requests go and how each is sent."""

    name: str
    url: str  # the chat completions URL
    trace: list[BenchRequest]  # the way's requests (the floor's name fewer adapters)
    send_for: SendFor
    # sent all at once before each of the way's windows, off the clock and not recorded:
    # for a floor behind the gateway, one request per adapter loads them all first
    warm: tuple[BenchRequest, ...] = ()


# Counters read before and after each window (the gateway's loads, by tier).
Counters = Callable[[], dict[str, float]]


@dataclass(slots=True)
class Replayed:
    """One way's windows put together."""

    answers: list[Answer] = field(default_factory=list)  # in trace order
    wall_s: float = 0.0  # the seconds its windows took
    grew: dict[str, float] = field(default_factory=dict)  # counters, over its windows only


def windows(requests: list[BenchRequest], count: int, seconds: float) -> list[list[BenchRequest]]:
    """The trace cut by arrival time into `count` windows of `seconds / count` each, every
    window re-timed to start at 0 (its requests keep their spacing and their order)."""
    length = seconds / count
    cut: list[list[BenchRequest]] = [[] for _ in range(count)]
    for request in requests:
        k = min(count - 1, int(request.at_s // length))
        cut[k].append(replace(request, at_s=request.at_s - k * length))
    return cut


async def interleaved(
    ways: list[Way], count: int, seconds: float, counters: Counters | None = None
) -> list[Replayed]:
    """Replay every way's trace window by window, the ways taking turns (the order rotates
    each window), so whatever else the host does at any minute falls on every way alike.
    Each window runs open loop and ends when its last request has; the next starts then.
    `counters`, when given, is read around each window (after the way's warm-up), so each
    way is charged only what grew while its own requests ran."""
    cut = [windows(way.trace, count, seconds) for way in ways]
    done = [Replayed() for _ in ways]
    for k in range(count):
        for turn in range(len(ways)):
            i = (k + turn) % len(ways)
            way = ways[i]
            if way.warm:
                await replay(way.url, [replace(r, at_s=0.0) for r in way.warm], way.send_for)
            before = await asyncio.to_thread(counters) if counters else {}
            got, wall = await replay(way.url, cut[i][k], way.send_for)
            after = await asyncio.to_thread(counters) if counters else {}
            done[i].answers.extend(got)
            done[i].wall_s += wall
            for name, value in after.items():
                done[i].grew[name] = done[i].grew.get(name, 0.0) + value - before.get(name, 0.0)
    return done
