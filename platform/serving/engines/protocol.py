"""The one small protocol every inference engine driver speaks, and its named errors.

A driver hides one engine's HTTP dialect (vLLM, SGLang) behind the same seven calls, so the
gateway, the health poller and the placement agent never learn which engine they talk to.
Adapter names here are always *engine-side* names: internal, unique per adapter version,
never user text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec

from loraplex.errors import LoraplexError
from loraplex.serving.engines.reported_facts import ReportedFacts

#: OpenAI chat messages as the gateway validated them: `{"role", "content"}`, plus
#: `tool_calls` on an assistant turn and `tool_call_id` on a tool result.
ChatMessage = dict[str, Any]


class GenerateOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The OpenAI fields beyond plain sampling, validated by the gateway, in OpenAI's terms.

    Each driver maps them to its engine's own names (vLLM takes OpenAI's as they are;
    SGLang's native `/generate` has names of its own). Unset fields keep the engine default.
    """

    n: int = 1  # choices, each with its own `index`
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None  # token id (a decimal string) -> bias
    logprobs: bool = False  # return each sampled token's logprob
    # Alternatives per token. Chat: `top_logprobs`; completions: the integer `logprobs`.
    top_logprobs: int | None = None
    # {"type": "json_object"} or {"type": "json_schema", "json_schema": {name, schema, strict}}
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None  # chat only: {"type": "function", "function"}
    tool_choice: str | dict[str, Any] | None = None  # "none" | "auto" | "required" | named
    parallel_tool_calls: bool | None = None


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One generation, already validated by the gateway, addressed to one engine."""

    # Caller-chosen, unique, and never a prefix of another live rid (SGLang aborts by prefix).
    rid: str
    adapter: str | None = None  # engine-side adapter name; None runs the base model
    messages: list[ChatMessage] | None = None  # chat ...
    prompt: str | None = None  # ... or completion: exactly one of the two
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    stream: bool = True
    include_usage: bool = True
    options: GenerateOptions | None = None  # None: plain text generation, one choice
    # Ask the engine for the prompt's and the output's token ids (the chunks carry them), so
    # that the answer can be continued exactly on another engine (gateway/failover.py).
    want_token_ids: bool = False
    # A continuation: the first engine's prompt ids followed by the answer's ids so far. The
    # driver sends these ids as the prompt of a raw completion (no template); `messages` or
    # `prompt` stay the client's, for logs.
    continue_ids: list[int] | None = None

    def __post_init__(self) -> None:
        """Refuse a request that is neither chat nor completion, or both."""
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("GenerateRequest needs exactly one of `messages` and `prompt`")

    @property
    def is_chat(self) -> bool:
        """True for a chat request (`messages`), False for a completion (`prompt`)."""
        return self.messages is not None

    @property
    def choices(self) -> int:
        """How many choices the reply has (`n`)."""
        return self.options.n if self.options is not None else 1


class GenerateChunk(msgspec.Struct, frozen=True):
    """A piece of one choice of a generation: new text since the last chunk, and counts.

    `completion_tokens` is the running total the engine reported so far, over all choices
    (None when the engine does not say), so a stream that is cut still knows what it cost.
    A chunk with no text and no finish may carry only counts (the engine's usage chunk).
    """

    text: str = ""
    # "stop" | "length" | "tool_calls" | "abort" | engine-specific
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    index: int = 0  # the choice this piece belongs to (0 unless n > 1)
    # OpenAI tool-call deltas, as chat streams send them: [{index, id?, type?, function:
    # {name?, arguments}}]; the arguments of one call arrive in pieces.
    tool_calls: list[dict[str, Any]] | None = None
    # OpenAI logprobs of this chunk's tokens: chat {"content": [...]}, completions
    # {"tokens", "token_logprobs", "top_logprobs", "text_offset"}: lists that concatenate.
    logprobs: dict[str, Any] | None = None
    # With `want_token_ids`: the ids of this chunk's output tokens, and (once, on the first
    # chunk) the prompt's as the engine tokenised it.
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


class EngineHealth(msgspec.Struct, frozen=True):
    """The answer of one health probe."""

    healthy: bool
    latency_s: float
    detail: str = ""


class EngineGauges(msgspec.Struct, frozen=True):
    """The names of an engine's Prometheus gauges for requests running and queued."""

    running: str
    waiting: str


class EngineLoad(msgspec.Struct, frozen=True):
    """Requests an engine reports running and waiting in its own queue, at one probe."""

    running: float
    waiting: float


#: The finish reason a driver reports when the stream ended because of `abort(rid)`.
ABORTED = "abort"


class EngineError(LoraplexError):
    """Something an engine did or failed to do."""

    status_code = 502
    code = "engine_error"


class EngineUnavailable(EngineError):
    """The engine cannot be reached or says it is not ready; try another engine."""

    status_code = 503
    code = "engine_unavailable"


class AdapterNotLoaded(EngineError):
    """The engine does not have the adapter the request named; load it and retry."""

    status_code = 503
    code = "adapter_not_loaded"

    def __init__(self, adapter: str, detail: str = "") -> None:
        super().__init__(detail or f"adapter {adapter!r} is not loaded on the engine")
        self.adapter = adapter


class EngineRejected(EngineError):
    """The engine refused the call; `detail` is the engine's own message."""

    code = "engine_rejected"

    def __init__(self, detail: str, *, engine_status: int) -> None:
        super().__init__(detail)
        self.engine_status = engine_status
        # The gateway validates input first, so a 4xx here is still the client's request
        # (e.g. a prompt over the context); anything else is the engine's fault.
        self.status_code = 400 if 400 <= engine_status < 500 else 502


class EngineDied(EngineError):
    """The engine went away in the middle of a stream, after the request was accepted."""

    code = "engine_died"


@runtime_checkable
class EngineDriver(Protocol):
    """What the platform needs from an inference engine. One instance per engine URL."""

    kind: str  # "vllm" | "sglang"
    url: str
    # Whether the driver returns token ids (`want_token_ids`) and continues an answer from
    # them (`continue_ids`): what a failover needs to go on exactly on this engine.
    continues_by_token_ids: bool

    async def health(self) -> EngineHealth:
        """Probe the engine; never raises for an unreachable engine, reports it instead."""
        ...

    async def list_loaded(self) -> set[str]:
        """Engine-side names of the adapters the engine holds now."""
        ...

    async def load(self, name: str, path: Path, pinned: bool = False) -> None:
        """Make `name` (the adapter in directory `path`) loaded; a no-op if it already is."""
        ...

    async def unload(self, name: str) -> None:
        """Make `name` not loaded; a no-op if the engine does not have it."""
        ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Stream the generation; the last chunk carries `finish_reason`."""
        ...

    async def abort(self, rid: str) -> None:
        """Stop the generation `rid` on the engine and end its stream; unknown rids are fine."""
        ...

    async def metrics(self) -> dict[str, float]:
        """The engine's Prometheus samples, summed over labels, by metric name."""
        ...

    async def queue_depth(self) -> EngineLoad:
        """Requests running and waiting on the engine, from its own metrics."""
        ...

    async def reported_facts(self) -> ReportedFacts:
        """What the engine says it was started with; raises EngineSilent if it is down."""
        ...

    async def aclose(self) -> None:
        """Close the driver's HTTP client."""
        ...
