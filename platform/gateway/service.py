"""One inference request, end to end: limits, resolution, the engine pump, and the reply.

The HTTP controller hands a validated OpenAI request here and gets back either a complete
JSON body or an async iterator of SSE bytes. Usage is recorded once per request, when the
pump ends — also for streams that were cut.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from loraplex.errors import InvalidInput, LoraplexError
from loraplex.gateway import observe
from loraplex.gateway.admission import Ticket
from loraplex.gateway.buffer import StreamBuffer, Taken
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.lane import PriorityLane, Urgent
from loraplex.gateway.options import checked_logit_bias
from loraplex.gateway.pump import EngineRun, StreamLimits, pump
from loraplex.gateway.relay import encode_events, until_disconnect
from loraplex.gateway.replies import completion_body
from loraplex.gateway.resolve import ModelResolver, Target
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.schemas import ChatCompletionRequest, CompletionRequest
from loraplex.gateway.sse import ChunkEncoder, EventEncoder
from loraplex.gateway.tokens import count_prompt_tokens, vocab_size
from loraplex.observability.metrics import TenantLabeler
from loraplex.serving.engines import GenerateRequest


class GatewayTimeout(LoraplexError):
    """A non-streaming request ran past one of its deadlines."""

    status_code = 504
    code = "timeout"


class UpstreamFailed(LoraplexError):
    """The engine failed the request."""

    status_code = 502
    code = "engine_error"


NO_ENGINE_RETRY_AFTER_S = 5  # an engine back in rotation shows up within a health interval


class NoEngine(LoraplexError):
    """No engine could serve the request (none healthy, or each one tried failed)."""

    status_code = 503
    code = "engine_unavailable"

    def __init__(self, detail: str):
        super().__init__(detail, headers={"Retry-After": str(NO_ENGINE_RETRY_AFTER_S)})


@dataclass
class AdmittedRequest:
    """A request ready to run: who, what, and the engine request without rid/adapter."""

    tenant_id: UUID
    target: Target
    request: GenerateRequest
    kind: str
    stream: bool
    include_usage: bool
    prompt_tokens_estimate: int | None
    resumable: bool = False
    request_id: str = ""
    ticket: Ticket | None = None  # admission: leases and the rate-limit headers
    received_at: float | None = None  # monotonic; when the handler got the request
    urgent: Urgent | None = None  # released when its engine request is sent (lane.py)


class Gateway:
    """Runs inference requests through the router; owns nothing but references."""

    def __init__(
        self,
        resolver: ModelResolver,
        router: EngineRouter,
        usage: Any | None,
        limits: StreamLimits,
        labeler: TenantLabeler | None = None,
        gate: EngineGate | None = None,
        lane: PriorityLane | None = None,
        resumable: ResumableStreams | None = None,
    ):
        self.resolver, self.router, self.usage, self.limits = resolver, router, usage, limits
        self.gate = gate or EngineGate(None, None, router, parallelism=1)
        self.lane = lane or PriorityLane()
        self.labeler = labeler or TenantLabeler()
        self.resumable = resumable  # None: `stream_options.resumable` is answered with 404
        self._writers: set[asyncio.Task[None]] = set()
        self._pumps: set[asyncio.Task[None]] = set()  # strong references until they end

    async def aclose(self) -> None:
        """Cancel what still runs at shutdown: engine pumps and resumable-stream writers
        (the server has stopped taking requests; their clients are gone)."""
        tasks = [*self._pumps, *self._writers]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def prepare(
        self,
        tenant_id: UUID,
        body: ChatCompletionRequest | CompletionRequest,
        tenant_limits: dict[str, int],
        received_at: float | None = None,
    ) -> AdmittedRequest:
        """Resolve the model and check sizes; every refusal happens before an engine is touched.

        From here until its engine request is sent the request is urgent: streams in flight
        hold their writes for it (lane.py).
        """
        urgent = self.lane.admit()
        try:
            call = await self._prepare(tenant_id, body, tenant_limits, received_at)
        except BaseException:
            urgent.done()
            raise
        call.urgent = urgent
        return call

    async def _prepare(
        self,
        tenant_id: UUID,
        body: ChatCompletionRequest | CompletionRequest,
        tenant_limits: dict[str, int],
        received_at: float | None,
    ) -> AdmittedRequest:
        resolution = await self.resolver.resolve(tenant_id, body.model)
        target = resolution.pick(body.user)
        is_chat = isinstance(body, ChatCompletionRequest)
        messages = body.validated_messages() if isinstance(body, ChatCompletionRequest) else None
        prompt = body.single_prompt() if isinstance(body, CompletionRequest) else None
        options = body.options()
        if options is not None:
            _check_plan_choices(options.n, tenant_limits.get("max_choices_per_request"))
            checked_logit_bias(options.logit_bias, vocab_size(target.base_source))
        tools = options.tools if options is not None else None
        prompt_tokens = count_prompt_tokens(
            target.base_source, messages=messages, prompt=prompt, tools=tools
        )
        max_tokens = _max_tokens(
            body.token_limit(),
            prompt_tokens,
            target.max_context,
            tenant_limits.get("max_tokens_per_request"),
        )
        stream_options = body.stream_options
        request = GenerateRequest(
            rid="",
            messages=messages,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            stop=body.stop_list(),
            seed=body.seed,
            stream=True,
            include_usage=True,
            options=options,
        )
        call = AdmittedRequest(
            tenant_id,
            target,
            request,
            "chat" if is_chat else "completion",
            body.stream,
            bool(stream_options and stream_options.include_usage),
            prompt_tokens,
            bool(stream_options and stream_options.resumable),
            request_id=uuid.uuid4().hex[:24],
            received_at=received_at,
        )
        call.ticket = await self.gate.admit(
            tenant_id,
            tenant_limits,
            call.request_id,
            stream=body.stream,
            target=target,
            prompt_tokens=prompt_tokens or 0,
            max_tokens=max_tokens * request.choices,  # each choice may use all of them
        )
        return call

    def start(self, call: AdmittedRequest) -> tuple[EngineRun, StreamBuffer, asyncio.Task[None]]:
        """Start the engine pump for a prepared call."""
        prefix = "chatcmpl-" if call.kind == "chat" else "cmpl-"
        job = EngineRun(
            prefix + call.request_id,
            call.target,
            call.request,
            self.limits,
            time.monotonic(),
            received_at=call.received_at,
            on_sent=call.urgent.done if call.urgent is not None else _nothing,
            on_first_token=functools.partial(self.gate.first_token, request_id=call.request_id),
        )
        buffer = StreamBuffer(max_bytes=self.limits.buffer_bytes, choices=call.request.choices)
        task = asyncio.create_task(self._run(job, buffer, call))
        self._pumps.add(task)
        task.add_done_callback(self._pump_ended)
        return job, buffer, task

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        self._pumps.discard(task)
        if not task.cancelled():
            task.exception()  # a stream already told its client with an error event

    async def _run(self, job: EngineRun, buffer: StreamBuffer, call: AdmittedRequest) -> None:
        try:
            async with self.gate.hold(call.ticket, call.target, call.tenant_id):
                try:
                    await pump(job, buffer, self.router)
                finally:
                    if call.ticket is not None:
                        call.ticket.actual_tokens = buffer.prompt_tokens + buffer.completion_tokens
        finally:
            first = buffer.first_token_at
            self.gate.observe(
                job.engine_id,
                time.monotonic() - job.started_at,
                buffer.prompt_tokens,
                first - job.started_at if first else None,
                call.request_id,
            )
            observe.record(job, buffer, self.labeler(call.tenant_id), time.monotonic())
            if self.usage is not None:
                self.usage.record(
                    call.tenant_id,
                    call.target.version_id,
                    call.target.model,
                    buffer.prompt_tokens or (call.prompt_tokens_estimate or 0),
                    buffer.completion_tokens,
                    error=buffer.error is not None,
                    cut=buffer.finish_reason is None,
                )
            if not buffer.closed:  # cancelled: whoever still reads the events sees the end
                buffer.fail("aborted", "the request was cancelled")
            job.on_sent()  # never sent (refused, failed, cancelled): it is urgent no more

    async def run_whole(self, call: AdmittedRequest) -> tuple[str, Taken, StreamBuffer]:
        """Run a non-streaming request to its end: its id, every choice whole, the counts."""
        job, buffer, task = self.start(call)
        await task
        taken = buffer.take()
        if taken.error:
            code, message = taken.error
            if code == "engine_rejected":
                raise InvalidInput(f"the engine refused the request: {message}")
            if code == NoEngine.code:  # pump's words for "nothing could take it": retry
                raise NoEngine(message)
            error = GatewayTimeout if code.endswith("timeout") else UpstreamFailed
            raise error(message)
        return job.completion_id, taken, buffer

    async def complete(self, call: AdmittedRequest) -> dict[str, Any]:
        """Run a non-streaming request and build OpenAI's response body."""
        completion_id, taken, buffer = await self.run_whole(call)
        return completion_body(completion_id, call, taken, buffer)

    async def stream(
        self, call: AdmittedRequest, encoder_for: Callable[[str], EventEncoder] | None = None
    ) -> AsyncIterator[bytes]:
        """Run a streaming request; the iterator yields SSE bytes and cleans up when closed.

        `encoder_for(completion_id)` makes the events (default: OpenAI's chat or completion
        chunks; the Responses API brings its own typed events).
        """
        job, buffer, task = self.start(call)
        encoder = (
            encoder_for(job.completion_id)
            if encoder_for is not None
            else ChunkEncoder(
                job.completion_id,
                call.target.model,
                "chat" if call.kind == "chat" else "completion",
                choices=call.request.choices,
            )
        )
        if call.resumable and self.resumable is not None:
            events = encode_events(
                encoder, buffer, call.include_usage, heartbeat_s=None, lane=self.lane
            )
            await self.resumable.open(job.completion_id, call.tenant_id)
            writer = asyncio.create_task(
                self.resumable.write(job.completion_id, call.tenant_id, events, task)
            )
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
            return await self.resumable.read(job.completion_id, call.tenant_id, None)
        events = encode_events(
            encoder, buffer, call.include_usage, self.limits.heartbeat_s, lane=self.lane
        )
        return until_disconnect(events, task)


def _nothing() -> None:
    """No urgent claim to release."""


def _max_tokens(
    asked: int | None, prompt_tokens: int | None, max_context: int, plan_max: int | None
) -> int:
    room = max_context - (prompt_tokens or 0)
    if prompt_tokens is not None and room <= 0:
        raise InvalidInput(
            f"This model's maximum context length is {max_context} tokens; the prompt has "
            f"{prompt_tokens}.",
            param="messages",
        )
    if asked is not None and plan_max is not None and asked > plan_max:
        raise InvalidInput(
            f"max_tokens is {asked}; the plan allows at most {plan_max} per request",
            param="max_tokens",
        )
    if asked is not None and prompt_tokens is not None and asked > room:
        raise InvalidInput(
            f"This model's maximum context length is {max_context} tokens; the prompt has "
            f"{prompt_tokens} and max_tokens asks for {asked}.",
            param="max_tokens",
        )
    if asked is not None and asked > max_context:
        raise InvalidInput(
            f"max_tokens {asked} exceeds the model's context of {max_context}", param="max_tokens"
        )
    default = min(room, plan_max) if plan_max is not None else room
    return asked if asked is not None else max(1, default)


def _check_plan_choices(n: int, plan_max: int | None) -> None:
    if plan_max is not None and n > plan_max:
        raise InvalidInput(f"n is {n}; the plan allows at most {plan_max} choices", param="n")
