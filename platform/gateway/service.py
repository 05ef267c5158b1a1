"""One inference request, end to end: limits, resolution, the engine pump, and the reply.

The HTTP controller hands a validated OpenAI request here and gets back either a complete
JSON body or an async iterator of SSE bytes. Usage is recorded once per request, when the
pump ends — also for streams that were cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import anyio

from loraplex.control.canary.samples import PromptSampler
from loraplex.control.canary.window import CanaryWindow
from loraplex.control.quotas import Quotas
from loraplex.db.models.keys import INFERENCE_USAGE
from loraplex.errors import InvalidInput, LoraplexError, NotFound
from loraplex.gateway import observe
from loraplex.gateway.admission.budgets import BudgetGuard, prompt_bound
from loraplex.gateway.admission.handle import AdmissionHandle
from loraplex.gateway.admission.ticket import SpendHold
from loraplex.gateway.buffer import StreamBuffer, Taken
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.lane import PriorityLane, Urgent
from loraplex.gateway.options import checked_logit_bias
from loraplex.gateway.pump import EngineRun, StreamLimits, pump
from loraplex.gateway.relay import encode_events, until_disconnect
from loraplex.gateway.replies import completion_body
from loraplex.gateway.resolve import ModelResolver, Target
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.resume_readers import ResumeReaders
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.schemas import ChatCompletionRequest, CompletionRequest
from loraplex.gateway.sse import ChunkEncoder, EventEncoder
from loraplex.gateway.tokens import cheap_to_count, count_prompt_tokens, vocab_size
from loraplex.gateway.usage import SpendKey
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
    admission: AdmissionHandle | None = None  # its place, leases and rate-limit headers
    received_at: float | None = None  # monotonic; when the handler got the request
    urgent: Urgent | None = None  # released when its engine request is sent (lane.py)
    key_id: UUID | None = None  # the API key it came with (its budgets apply)
    spend: SpendHold | None = None  # its money reservation, settled when it ends
    usage_kind: str = "inference"  # its spend's kind: its key's ("eval" for an eval run's)


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
        readers: ResumeReaders | None = None,
        budgets: BudgetGuard | None = None,
        canary: CanaryWindow | None = None,
        samples: PromptSampler | None = None,
    ):
        self.resolver, self.router, self.usage, self.limits = resolver, router, usage, limits
        self.canary = canary  # counts requests through aliases with a canary; None: not counted
        self.samples = samples  # keeps opted-in canaries' prompts; None: none is kept
        self.budgets = budgets  # None: no money budgets (tests of the stream alone)
        self.gate = gate or EngineGate(None, None, router)
        self.lane = lane or PriorityLane()
        self.labeler = labeler or TenantLabeler()
        self.resumable = resumable  # None: `stream_options.resumable` is answered with 404
        # Resume readers' bounds; None: no bound (tests of the stream alone).
        self.readers = readers or ResumeReaders(None, max_readers=2**31)
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
        tenant_limits: Quotas,
        received_at: float | None = None,
        key_id: UUID | None = None,
        usage_kind: str = "inference",
    ) -> AdmittedRequest:
        """Resolve the model and check sizes; every refusal happens before an engine is touched.
        `usage_kind`: what its tokens are in the tenant's spend (its key's `usage_kind`).

        From here until its engine request is sent the request is urgent: streams in flight
        hold their writes for it (lane.py).
        """
        urgent = self.lane.admit()
        try:
            call = await self._prepare(tenant_id, body, tenant_limits, received_at, key_id)
        except BaseException:
            urgent.done()
            raise
        call.urgent = urgent
        call.usage_kind = usage_kind
        return call

    async def _prepare(
        self,
        tenant_id: UUID,
        body: ChatCompletionRequest | CompletionRequest,
        tenant_limits: Quotas,
        received_at: float | None,
        key_id: UUID | None = None,
    ) -> AdmittedRequest:
        resolution = await self.resolver.resolve(tenant_id, body.model)
        target = resolution.pick(body.user)
        is_chat = isinstance(body, ChatCompletionRequest)
        messages = body.validated_messages() if isinstance(body, ChatCompletionRequest) else None
        prompt = body.single_prompt() if isinstance(body, CompletionRequest) else None
        options = body.options()
        if options is not None:
            _check_plan_choices(options.n, tenant_limits.max_choices_per_request)
            checked_logit_bias(options.logit_bias, vocab_size(target.base_source))
        tools = options.tools if options is not None else None
        count = functools.partial(
            count_prompt_tokens, target.base_source,
            messages=messages, prompt=prompt, tools=tools, limit=target.max_context,
        )  # fmt: skip
        if cheap_to_count(target.base_source, messages=messages, prompt=prompt, tools=tools):
            prompt_tokens = count()
        else:
            prompt_tokens = await anyio.to_thread.run_sync(count)
        max_tokens = _max_tokens(
            body.token_limit(),
            prompt_tokens,
            target.max_context,
            tenant_limits.max_tokens_per_request,
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
            key_id=key_id,
        )
        call.spend = await self._reserve_spend(call, tenant_limits, max_tokens * request.choices)
        try:
            call.admission = await self.gate.admit(
                tenant_id,
                tenant_limits,
                call.request_id,
                stream=body.stream,
                target=target,
                prompt_tokens=prompt_tokens or 0,
                max_tokens=max_tokens * request.choices,  # each choice may use all of them
            )
        except BaseException:
            if call.spend is not None:
                call.spend.use()  # refused: nothing was used, the whole reservation goes back
            await self._settle_spend(call)
            raise
        if call.admission is not None and call.admission.ticket is not None:
            call.admission.ticket.spend = call.spend  # settled with its tokens on release
        return call

    async def _reserve_spend(
        self, call: AdmittedRequest, limits: Quotas, completion: int
    ) -> SpendHold | None:
        """The price of the most the request may use, reserved from its budgets first:
        a request over its budget never waits for a place on the engines."""
        if self.budgets is None:
            return None
        return await self.budgets.reserve(
            call.tenant_id, limits, call.target.base_model,
            key_id=call.key_id, adapter_id=call.target.adapter_id,
            prompt=prompt_bound(call.prompt_tokens_estimate, call.request), completion=completion,
        )  # fmt: skip

    async def _settle_spend(self, call: AdmittedRequest) -> None:
        """Settle the call's money hold (once: a no-op after its ticket's release)."""
        if self.budgets is not None:
            await self.budgets.settle(call.spend)

    async def resume(
        self,
        tenant_id: UUID,
        tenant_limits: Quotas,
        completion_id: str,
        last_event_id: int | None,
    ) -> AsyncIterator[bytes]:
        """A resumable stream's events after `last_event_id`, for its tenant, held under the
        tenant's and this process's reader bounds (`ResumeReaders`)."""
        streams = self.resumable
        if streams is None:
            raise NotFound("resumable streams need Redis (LORAPLEX_REDIS_URL)")
        return await self.readers.follow(
            tenant_id,
            tenant_limits,
            functools.partial(streams.read, completion_id, tenant_id, last_event_id),
        )

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
            on_first_token=call.admission.first_token if call.admission else _ignore_first_token,
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
            async with contextlib.AsyncExitStack() as held:
                if call.admission is not None:
                    await held.enter_async_context(call.admission)
                try:
                    await pump(job, buffer, self.router)
                finally:
                    if call.admission is not None:
                        call.admission.used(buffer.prompt_tokens + buffer.completion_tokens)
                    if call.spend is not None:  # its real cost, settled as the tokens are
                        call.spend.use(prompt=_prompt_tokens(call, buffer),
                                       completion=buffer.completion_tokens)  # fmt: skip
        finally:
            first = buffer.first_token_at
            if call.admission is not None:
                call.admission.finished(
                    job.engine_id,
                    time.monotonic() - job.started_at,
                    buffer.prompt_tokens,
                    first - job.started_at if first else None,
                )
            observe.record(job, buffer, self.labeler(call.tenant_id), time.monotonic())
            if first is not None and buffer.error is None:
                self.router.first_token(job.target, first - job.started_at)
            if self.usage is not None:
                self.usage.record(
                    call.tenant_id,
                    call.target.version_id,
                    call.target.model,
                    _prompt_tokens(call, buffer),
                    buffer.completion_tokens,
                    error=buffer.error is not None,
                    cut=buffer.finish_reason is None,
                    spend=_spend_of(call),
                )
            target = call.target
            if self.canary is not None and target.canary_alias_id and target.version_id:
                self.canary.record(
                    target.canary_alias_id,
                    target.version_id,
                    buffer.error[0] if buffer.error else None,
                    # from the engine request, not the request's start: an adapter's cold
                    # load (once per engine) must not read as a slower version
                    first - (job.engine_sent_at or job.started_at) if first else None,
                )
            served = buffer.error is None and buffer.finish_reason is not None
            live = call.usage_kind == INFERENCE_USAGE  # an eval run's prompts are not live ones
            if self.samples is not None and target.prompt_sample and served and live:
                # its prompt may join the canary's sample (never waits, never raises)
                room = target.max_context - (call.prompt_tokens_estimate or 0)
                self.samples.keep(target.prompt_sample, call.request, room)
            if not buffer.closed:  # cancelled: whoever still reads the events sees the end
                buffer.fail("aborted", "the request was cancelled")
            job.on_sent()  # never sent (refused, failed, cancelled): it is urgent no more
            await self._settle_spend(call)  # last: usage is recorded even if this is cut

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


def _ignore_first_token(engine_id: str, ttft_s: float) -> None:
    """No admission to tell of the first token."""


def _prompt_tokens(call: AdmittedRequest, buffer: StreamBuffer) -> int:
    """The prompt tokens billed: the engine's count, else the gateway's own."""
    return buffer.prompt_tokens or (call.prompt_tokens_estimate or 0)


def _spend_of(call: AdmittedRequest) -> SpendKey:
    """Who spent (key, adapter, base model) and what, for the spend record."""
    actual = call.spend.actual if call.spend is not None else None
    return SpendKey(
        call.key_id, call.target.adapter_id, call.target.base_model, actual or 0, call.usage_kind
    )


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
