"""HTTP plumbing shared by the engine drivers: control calls, live streams, SSE, metrics.

Control calls and probes go through one pooled httpx client; generations through
`streams.py` (aiohttp), where the per-chunk cost is.

The per-chunk path matters: the gateway must keep at least 0.95 times the engine's throughput, which
leaves about 50 µs of CPU per streamed chunk (docs/engines.md §10.3). So SSE is split
on raw bytes, never decoded to `str` line by line, and JSON goes through msgspec.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from loraplex.serving.engines.openai_wire import ModelCard, decode_models
from loraplex.serving.engines.protocol import (
    ABORTED,
    EngineDied,
    EngineError,
    EngineGauges,
    EngineHealth,
    EngineLoad,
    EngineRejected,
    EngineUnavailable,
    GenerateChunk,
)
from loraplex.serving.engines.reported_facts import ReportedFacts, read_reported_facts
from loraplex.serving.engines.streams import (
    AiohttpStreams,
    HttpxStreams,
    Reply,
    StreamClosed,
    Streams,
)

JSON_HEADERS = {"content-type": "application/json"}
DONE = b"[DONE]"
# Reading a stream fails this way when the engine dies or `abort` closes it.
STREAM_BROKEN = (StreamClosed,)

encode_json = msgspec.json.Encoder().encode
# Generations one driver runs at once before the next waits for a connection; the gateway's
# admission cap keeps far fewer in flight.
MAX_STREAMS = 256


@dataclass(frozen=True, slots=True)
class DriverTimeouts:
    """Seconds a driver waits, per kind of call."""

    connect: float = 5.0
    # Between two chunks of a stream. A backstop only: the gateway enforces its own queue,
    # TTFT and idle timeouts, which are shorter.
    read: float = 300.0
    control: float = 120.0  # load/unload: SGLang's unload waits for in-flight requests
    probe: float = 5.0  # health, models, metrics


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header an engine started with `--api-key` wants (none without a key)."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def make_client(url: str, timeouts: DriverTimeouts) -> httpx.AsyncClient:
    """One pooled client per engine for control calls and probes (generations: streams.py)."""
    return httpx.AsyncClient(
        base_url=url,
        timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect, pool=timeouts.connect),
        # Idle connections are dropped before the engine's own keep-alive timeout (uvicorn's
        # default, used by vLLM and SGLang, is 5 s): reusing one the engine just closed fails
        # the request with ReadError, which would look like a dead engine.
        limits=httpx.Limits(max_connections=32, max_keepalive_connections=8, keepalive_expiry=2.0),
    )


async def iter_sse_data(blocks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The payloads of the `data:` lines of an SSE body, as bytes, `[DONE]` included.

    Engines put one JSON document on one `data:` line, so multi-line data fields (legal
    SSE, unused by vLLM and SGLang) are not joined.
    """
    pending = b""
    async for block in blocks:
        payloads, pending = sse_payloads(pending, block)
        for data in payloads:
            yield data
    if pending.startswith(b"data:"):
        yield pending[5:].strip()


def sse_payloads(pending: bytes, block: bytes) -> tuple[list[bytes], bytes]:
    """The `data:` payloads completed by `block` after the unfinished line `pending`, and
    the new unfinished line."""
    *lines, pending = (pending + block).split(b"\n") if pending else block.split(b"\n")
    return [line[5:].strip() for line in lines if line.startswith(b"data:")], pending


def sum_samples(text: str) -> dict[str, float]:
    """Prometheus text exposition → {sample name: value summed over label sets}."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")):
                continue
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def samples_named(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The samples called `names` in Prometheus text, each summed over its label sets,
    without parsing the rest: an engine's page is ~80 KB of histograms, and parsing all of
    it (`sum_samples`) took ~46 ms of the event loop on the development VM, every probe."""
    totals = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if not line.startswith(names):
            continue
        labels_end = line.rfind("}")
        if labels_end >= 0:
            name, fields = line[: line.find("{")], line[labels_end + 1 :].split()
        else:
            name, *fields = line.split()
        if name in totals and fields:
            totals[name] += float(fields[0])
    return totals


class HttpDriver:
    """Base of the HTTP engine drivers: the client, the rid → open stream map, probes."""

    kind = ""
    health_path = "/health"
    gauges = EngineGauges(running="", waiting="")  # each driver names its engine's gauges
    # Whether the driver returns token ids (`want_token_ids`) and continues from them
    # (`continue_ids`): what a failover needs to continue an answer exactly on this engine.
    continues_by_token_ids = False

    def __init__(
        self,
        url: str,
        *,
        base_model: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeouts: DriverTimeouts | None = None,
        headers: Mapping[str, str] | None = None,
        api_key: str | None = None,
    ) -> None:
        # With the engine's `--api-key`, every call carries it, probes included: SGLang and
        # vLLM leave /health and /metrics open, but the key costs nothing there, and an
        # engine put behind a proxy that checks every path keeps working (docs/engines.md §2.5).
        headers = {**(headers or {}), **auth_headers(api_key)}
        self.url = url.rstrip("/")
        self._base_model = base_model
        self.timeouts = timeouts or DriverTimeouts()
        self._client = client or make_client(self.url, self.timeouts)
        self._client.headers.update(headers or {})
        # Generations: through an injected client (tests), else aiohttp (streams.py: why).
        self._generations: Streams = (
            HttpxStreams(client)
            if client is not None
            else AiohttpStreams(
                self.url,
                connect_s=self.timeouts.connect,
                read_s=self.timeouts.read,
                max_streams=MAX_STREAMS,
                headers=headers,
            )
        )
        self._streams: dict[str, Reply] = {}
        self._aborted: set[str] = set()

    async def aclose(self) -> None:
        """Close the driver's HTTP clients."""
        await self._generations.aclose()
        await self._client.aclose()

    async def health(self) -> EngineHealth:
        """Probe the engine's health route; an unreachable engine is unhealthy, not an error."""
        started = time.perf_counter()
        try:
            response = await self._client.get(self.health_path, timeout=self.timeouts.probe)
        except httpx.HTTPError as exc:
            return EngineHealth(False, time.perf_counter() - started, f"unreachable: {exc!r}")
        elapsed = time.perf_counter() - started
        if response.status_code == 200:
            return EngineHealth(True, elapsed)
        return EngineHealth(False, elapsed, f"HTTP {response.status_code}")

    async def models(self) -> list[ModelCard]:
        """The engine's model cards: the served base model and every loaded adapter."""
        response = await self._call("GET", "/v1/models", limit_s=self.timeouts.probe)
        self._raise_for_error(response)
        return decode_models(response.content).data

    async def base_model(self) -> str:
        """The served name of the base model, asked of the engine once."""
        if self._base_model is None:
            bases = [card.id for card in await self.models() if card.parent is None]
            if not bases:
                raise EngineRejected("the engine lists no base model", engine_status=500)
            self._base_model = bases[0]
        return self._base_model

    async def list_loaded(self) -> set[str]:
        """Engine-side names of the adapters the engine holds now (cards with a parent)."""
        return {card.id for card in await self.models() if card.parent is not None}

    async def metrics(self) -> dict[str, float]:
        """The engine's Prometheus samples, summed over labels, by metric name."""
        response = await self._call("GET", "/metrics", limit_s=self.timeouts.probe)
        self._raise_for_error(response)
        return sum_samples(response.text)

    async def queue_depth(self) -> EngineLoad:
        """Requests running and waiting on the engine, from its own metrics."""
        response = await self._call("GET", "/metrics", limit_s=self.timeouts.probe)
        self._raise_for_error(response)
        running, waiting = self.gauges.running, self.gauges.waiting
        samples = samples_named(response.text, (running, waiting))
        return EngineLoad(samples[running], samples[waiting])

    async def reported_facts(self) -> ReportedFacts:
        """What the engine says it was started with (registration checks claims against it)."""
        return await read_reported_facts(self._client, self.timeouts.probe)

    async def _call(
        self, method: str, path: str, body: Any = None, *, limit_s: float | None = None
    ) -> httpx.Response:
        """One non-streaming call; an unreachable engine becomes `EngineUnavailable`."""
        content = None if body is None else encode_json(body)
        try:
            return await self._client.request(
                method,
                path,
                content=content,
                headers=JSON_HEADERS if content is not None else None,
                timeout=limit_s or self.timeouts.control,
            )
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"{self.kind} engine at {self.url}: {exc!r}") from exc

    def _raise_for_error(self, response: httpx.Response) -> None:
        """Raise the named error for a failed control call."""
        if response.status_code >= 400:
            raise self._error_for(response.status_code, response.content, None)

    def _error_for(self, status: int, body: bytes, adapter: str | None) -> EngineError:
        """The named error for an engine's error response; drivers refine it."""
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def _open_stream(
        self, rid: str, path: str, body: Any, adapter: str | None
    ) -> AsyncIterator[Reply]:
        """Send a generation, register its reply under `rid` so `abort` can reach it."""
        try:
            reply = await self._generations.post(path, encode_json(body))
        except StreamClosed as exc:
            raise EngineUnavailable(f"{self.kind} engine at {self.url}: {exc}") from exc
        try:
            if reply.status >= 400:
                try:
                    content = await reply.read()
                except StreamClosed as exc:
                    raise EngineUnavailable(f"{self.kind} engine at {self.url}: {exc}") from exc
                raise self._error_for(reply.status, content, adapter)
            self._streams[rid] = reply
            yield reply
        finally:
            self._streams.pop(rid, None)
            self._aborted.discard(rid)
            await reply.close()

    async def _close_stream(self, rid: str) -> None:
        """Close `rid`'s reply: its reader ends, and the engine sees a disconnect."""
        reply = self._streams.get(rid)
        if reply is not None:
            self._aborted.add(rid)
            await reply.close()

    def _was_aborted(self, rid: str) -> bool:
        """Whether the stream `rid` ended because `abort(rid)` closed it."""
        return rid in self._aborted

    async def _read_stream(
        self, rid: str, reply: Reply, parse: Callable[[bytes], GenerateChunk | None]
    ) -> AsyncIterator[GenerateChunk]:
        """Relay an SSE generation: chunks until `[DONE]`; a cut before the finish is a death.

        A stream closed by `abort(rid)` ends with one `finish_reason="abort"` chunk instead.
        """
        finished = done = False
        pending = b""
        read_block = reply.read_block
        try:
            # The SSE split is inline (`sse_payloads`), and blocks are awaited straight from
            # the client library: each async-generator layer costs every token a few
            # microseconds (issue #50).
            while block := await read_block():
                payloads, pending = sse_payloads(pending, block)
                for data in payloads:
                    # After [DONE] the body is read to its end (a few bytes) rather than
                    # left: a response closed unread takes its connection with it, and the
                    # next request would pay a new TCP connect and a getaddrinfo in a thread.
                    done = done or data == DONE
                    if done:
                        continue
                    chunk = parse(data)
                    if chunk is not None:
                        finished = finished or chunk.finish_reason is not None
                        yield chunk
            last = pending[5:].strip() if pending.startswith(b"data:") else DONE
            if not done and last != DONE:  # a last line with no newline after it
                chunk = parse(last)
                if chunk is not None:
                    finished = finished or chunk.finish_reason is not None
                    yield chunk
        except (*STREAM_BROKEN, *reply.errors) as exc:
            if not self._was_aborted(rid):
                message = f"{self.kind} engine at {self.url} dropped {rid}: {exc!r}"
                raise EngineDied(message) from exc
        except msgspec.DecodeError as exc:
            raise EngineDied(f"{self.kind} engine sent an unreadable chunk: {exc}") from exc
        if finished:
            return
        if self._was_aborted(rid):
            yield GenerateChunk(finish_reason=ABORTED)
            return
        raise EngineDied(f"{self.kind} engine at {self.url} ended {rid} before it finished")


def error_message(body: bytes) -> str:
    """The engine's message out of an error body: `{"error": {"message"}}`, `{"message"}`
    (both engines use both), or the raw body when it is not JSON."""
    message = None
    with contextlib.suppress(msgspec.DecodeError):
        document = msgspec.json.decode(body)
        inner = document.get("error", document) if isinstance(document, dict) else document
        message = inner.get("message") if isinstance(inner, dict) else inner
    if isinstance(message, str) and message:
        return message
    return body.decode("utf-8", "replace").strip() or "(empty response)"
