"""Driver for an SGLang server (0.5.23), the production engine (on GPUs, and on CPU here).

Every request and response shape here is taken from docs/engines.md (§ numbers below) and
pinned by tests/unit/engines/test_sglang_contract.py. The quirks it guards against:

- On the OpenAI routes a bare adapter name as `model` silently runs the *base* model
  (§3.2), so chat requests always say `"<base>:<adapter>"`, and `lora_path` as well.
- `/generate` streams *cumulative* text (§5); the driver turns it into deltas.
- A streamed `/generate` error arrives as an SSE event after HTTP 200 (§3.3).
- `/abort_request` needs a live rid exactly, then aborts every rid that starts with it
  (§5): callers must use rids that are not prefixes of one another (fixed-length random
  ids are).
- A chat stream's usage comes in its own chunk after the finish (seen live); the driver
  puts it on the finish chunk, where callers stop reading.
- An unloaded adapter is not unservable: SGLang re-loads it when a request names it (§2.2,
  seen live), so the loaded set it reports is the truth placement reconciles to.

OpenAI options (§11). Chat goes to SGLang's OpenAI route, which takes every option under
its OpenAI name and format (`openai_body` writes them). Completions go to native
`/generate`, where they become `sampling_params` keys (penalties and `logit_bias` as they
are; `response_format` as `json_schema`, a JSON *string*: the schema itself, or
`{"type": "object"}` for `json_object`, as SGLang's own OpenAI routes do) and top-level
logprob switches; its `[logprob, token_id, text]` triples become OpenAI completions
logprobs. Tools are chat-only and ignored on completions.

`n > 1` is never sent to SGLang. The driver fans it out as `n` single requests, rids
`f"{rid}-{i}"`, merged into one stream whose chunks carry `index = i`, because:

- sglang#36894: `/unload_lora_adapter` has deadlocked the scheduler after parallel-
  sampling traffic (§9), and Loraplex unloads adapters all the time;
- SGLang replaces the rids of an `n > 1` request by random ones (and forgets ours), so
  `abort(rid)` could not reach it at all (§5).

Each sub-request keeps the caller's seed plus `i` (`seed + i`), so choice 0 is the single
request with that seed and the `n` choices differ even where SGLang honours seeds (only
with `--enable-deterministic-inference`; otherwise it ignores them). A streamed fan-out
starts choice 0 alone and the others once choice 0 streams (its prompt is then in the
prefix cache, so they do not prefill it again; SGLang's own `n > 1` waits for a prefill
the same way). Counts are billed the OpenAI way: the prompt once, completion tokens
summed over the choices, as a running total on every merged chunk. `abort(rid)` aborts
every sub-request by its own rid.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec

from loraplex.serving.engines.http_driver import (
    STREAM_BROKEN,
    DriverTimeouts,
    HttpDriver,
    error_message,
)
from loraplex.serving.engines.openai_wire import CHAT_PATH, openai_body, parse_event
from loraplex.serving.engines.protocol import (
    ABORTED,
    AdapterNotLoaded,
    EngineDied,
    EngineError,
    EngineGauges,
    EngineLoad,
    EngineRejected,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
)
from loraplex.serving.engines.streams import Reply

GENERATE_PATH = "/generate"
# §3.3: the message for a name the server never loaded (a previously loaded one is reloaded).
NEVER_LOADED = "has never been loaded"
# §2.2: the message for unloading a name that is not loaded.
DOES_NOT_EXIST = "does not exist"
# §11: what SGLang's own OpenAI routes constrain `{"type": "json_object"}` to.
JSON_OBJECT_SCHEMA = '{"type": "object"}'

replace = msgspec.structs.replace
encode_json = msgspec.json.Encoder().encode


class LoRAUpdateOutput(msgspec.Struct):
    """The reply to `/load_lora_adapter` and `/unload_lora_adapter` (§2.1), 200 or 400."""

    success: bool = False
    error_message: str | None = None
    # null on a failed unload (seen live on 0.5.23), the name -> path map otherwise
    loaded_adapters: dict[str, str] | None = None

    @property
    def loaded(self) -> dict[str, str]:
        """The loaded adapters the reply lists, empty when it lists none."""
        return self.loaded_adapters or {}


class _FinishReason(msgspec.Struct):
    type: str = "stop"


#: One logprob entry of `/generate` (§11): `[logprob, token_id, text]`; the logprob is
#: null where the engine's JSON encoder met a non-finite number.
_TokenLogprob = tuple[float | None, int, str | None]


class _MetaInfo(msgspec.Struct):
    finish_reason: _FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Only with `return_logprob`: every output token so far (cumulative, like `text`) and,
    # with `top_logprobs_num > 0`, its alternatives (null for a position without any).
    output_token_logprobs: list[_TokenLogprob] | None = None
    output_top_logprobs: list[list[_TokenLogprob] | None] | None = None


class _GenerateError(msgspec.Struct):
    message: str = ""
    code: int | None = None


class GenerateOutput(msgspec.Struct):
    """One `/generate` result or stream event (§5), or the error sent in its place (§3.3)."""

    text: str = ""
    meta_info: _MetaInfo | None = None
    error: _GenerateError | None = None


#: SGLang's gauges (§6; served only with --enable-metrics), as 0.5.23 names them live.
SGLANG_GAUGES = EngineGauges(running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs")


class _RankLoad(msgspec.Struct):
    num_running_reqs: float = 0.0
    num_waiting_reqs: float = 0.0


class LoadsOutput(msgspec.Struct):
    """`GET /v1/loads`: the scheduler's own counts, one entry per data-parallel rank."""

    loads: list[_RankLoad] = []


decode_update = msgspec.json.Decoder(LoRAUpdateOutput).decode
decode_loads = msgspec.json.Decoder(LoadsOutput).decode
decode_output = msgspec.json.Decoder(GenerateOutput).decode


def sglang_model(base: str, adapter: str | None) -> str:
    """The OpenAI `model` that selects `adapter` on SGLang: `"<base>:<adapter>"`, never bare."""
    if adapter is None:
        return base
    if not adapter:
        raise ValueError("an empty adapter name would run the base model")
    return f"{base}:{adapter}"


def json_schema(response_format: dict[str, Any] | None) -> str | None:
    """`/generate`'s `json_schema` (a JSON string) for an OpenAI `response_format` (§11).

    `json_schema` constrains to its `schema` whatever `strict` says (SGLang's completions
    route does the same); `json_object` to any object; `text` (or none) to nothing.
    """
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return JSON_OBJECT_SCHEMA
    if kind != "json_schema":
        return None
    schema = ((response_format or {}).get("json_schema") or {}).get("schema")
    if schema is None:
        # SGLang's OpenAI routes refuse it so too (400), rather than constraining nothing.
        raise EngineRejected(
            "schema is required for a json_schema response format", engine_status=400
        )
    return encode_json(schema).decode()


def sampling_params(request: GenerateRequest) -> dict[str, Any]:
    """`/generate`'s `sampling_params` for `request`; unset values keep the engine default."""
    params: dict[str, Any] = {}
    if request.max_tokens is not None:
        params["max_new_tokens"] = request.max_tokens
    for key in ("temperature", "top_p", "stop"):
        value = getattr(request, key)
        if value is not None:
            params[key] = value
    if request.seed is not None:
        # SGLang's SamplingParams names the per-request seed so (honoured only with
        # --enable-deterministic-inference, §11).
        params["sampling_seed"] = request.seed
    options = request.options
    if options is not None:
        # `n` is never sent: the driver fans choices out itself (module docstring).
        for key in ("presence_penalty", "frequency_penalty", "logit_bias"):
            value = getattr(options, key)
            if value is not None:
                params[key] = value  # same names and formats as OpenAI's (§11)
        schema = json_schema(options.response_format)
        if schema is not None:
            params["json_schema"] = schema
    return params


def generate_body(request: GenerateRequest) -> dict[str, Any]:
    """The `/generate` body for a completion request (§3.1, §5, §11)."""
    body: dict[str, Any] = {
        "rid": request.rid,
        "text": request.prompt,
        "sampling_params": sampling_params(request),
        "stream": request.stream,
    }
    if request.adapter is not None:
        body["lora_path"] = request.adapter  # an adapter *name*, despite the field's name
    options = request.options
    if options is not None and options.logprobs:
        body["return_logprob"] = True
        body["logprob_start_len"] = -1  # output tokens only, none of the prompt's
        body["top_logprobs_num"] = options.top_logprobs or 0
        body["return_text_in_logprobs"] = True  # each token's text, not just its id
    return body


def chat_body(request: GenerateRequest, base: str) -> dict[str, Any]:
    """The `/v1/chat/completions` body: the adapter in `model` and `lora_path`, our `rid`.

    Every option goes under its OpenAI name and format, which SGLang's chat route takes
    as it is (§11), so `openai_body` writes them all.
    """
    # Running counts on every chunk (0.5.23 accepts vLLM's option), so a stream cut in the
    # middle is billed what it cost; the last chunk still repeats the totals.
    body = openai_body(request, sglang_model(base, request.adapter), continuous_usage_stats=True)
    body.pop("n", None)  # fanned out by the driver, never sent (module docstring)
    if request.adapter is not None:
        body["lora_path"] = request.adapter  # same choice as `model`, in case parsing changes
    body["rid"] = request.rid
    return body


def completion_logprobs(
    meta: _MetaInfo, start: int, text_offset: int
) -> tuple[dict[str, list[Any]] | None, int]:
    """OpenAI completions logprobs for the output tokens from `start` on, and the offset
    after them.

    `tokens[i]` is the token's text, `top_logprobs[i]` maps the sampled token and its
    alternatives to their logprobs (as vLLM answers), and `text_offset[i]` is where the
    token starts in the choice's generated text (`text_offset` is where `start` does).
    """
    entries = meta.output_token_logprobs
    if not entries or len(entries) <= start:
        return None, text_offset
    tops = meta.output_top_logprobs or []
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float | None]] = []
    offsets: list[int] = []
    for position in range(start, len(entries)):
        logprob, _token_id, text = entries[position]
        text = text or ""
        alternatives = {text: logprob}
        top = tops[position] if position < len(tops) else None
        for alt_logprob, _alt_id, alt_text in top or ():
            alternatives.setdefault(alt_text or "", alt_logprob)
        tokens.append(text)
        token_logprobs.append(logprob)
        top_logprobs.append(alternatives)
        offsets.append(text_offset)
        text_offset += len(text)
    logprobs: dict[str, list[Any]] = {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }
    return logprobs, text_offset


def output_chunk(output: GenerateOutput, seen: int, adapter: str | None) -> GenerateChunk:
    """The protocol chunk for a `/generate` output, whose text so far is `seen` long."""
    if output.error is not None:
        raise _rejection(output.error.message, output.error.code or 400, adapter)
    meta = output.meta_info or _MetaInfo()
    finish = meta.finish_reason.type if meta.finish_reason else None
    return GenerateChunk(output.text[seen:], finish, meta.prompt_tokens, meta.completion_tokens)


def _rejection(message: str, status: int, adapter: str | None) -> EngineError:
    """A never-loaded adapter is `AdapterNotLoaded`; any other refusal is `EngineRejected`."""
    if adapter is not None and NEVER_LOADED in message:
        return AdapterNotLoaded(adapter, message)
    return EngineRejected(message, engine_status=status)


def fan_out(request: GenerateRequest) -> list[GenerateRequest]:
    """The single-choice requests an `n`-choice request is sent as (module docstring).

    Choice `i` has rid `f"{rid}-{i}"` (each starts with the caller's rid and none is a
    prefix of another caller's) and seed `seed + i`, wrapped into SGLang's int64 range.
    """
    if request.choices == 1:
        return [request]
    options = replace(request.options or GenerateOptions(), n=1)
    return [
        replace(
            request,
            rid=f"{request.rid}-{i}",
            seed=None if request.seed is None else _int64(request.seed + i),
            options=options,
        )
        for i in range(request.choices)
    ]


def _int64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


@dataclass
class _FanOut:
    """A live fanned-out request: its sub-rids, and whether `abort` has stopped it."""

    rids: list[str]
    aborted: bool = False
    # Set once choice 0 streams (or ends, or `abort` came): the other choices may start.
    primed: asyncio.Event = field(default_factory=asyncio.Event)


class _Usage:
    """Counts over the choices of a fan-out: the prompt once, completion tokens summed."""

    def __init__(self, choices: int) -> None:
        self.prompt_tokens: int | None = None
        self._completion: list[int | None] = [None] * choices

    def add(self, index: int, chunk: GenerateChunk) -> None:
        """Take the counts choice `index` reported on `chunk`."""
        if chunk.prompt_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = chunk.prompt_tokens  # the same prompt for every choice
        if chunk.completion_tokens is not None:
            self._completion[index] = chunk.completion_tokens

    @property
    def completion_tokens(self) -> int | None:
        """Completion tokens over all choices so far; None while no choice reported any."""
        counts = [count for count in self._completion if count is not None]
        return sum(counts) if counts else None


class SglangDriver(HttpDriver):
    """An `EngineDriver` for one SGLang server."""

    kind = "sglang"
    gauges = SGLANG_GAUGES
    # `--max-loras-per-batch` counts base-model requests as one of its slots (seen live on
    # 0.5.23): a batch with base requests has one adapter slot fewer.
    base_takes_a_slot = True

    def __init__(
        self,
        url: str,
        *,
        base_model: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeouts: DriverTimeouts | None = None,
    ) -> None:
        # §2.5: load/unload/abort (and generation, behind --api-key) want the key as a bearer
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        super().__init__(
            url, base_model=base_model, client=client, timeouts=timeouts, headers=headers
        )
        self._fan_outs: dict[str, _FanOut] = {}

    async def load(self, name: str, path: Path, pinned: bool = False) -> None:
        """Load adapter `name` from `path`, pinned to a GPU slot when `pinned`."""
        body = {"lora_name": name, "lora_path": str(path), "pinned": pinned}
        reply = await self._update("/load_lora_adapter", body)
        # A duplicate name fails, but names are unique per version: the same name at the same
        # path is this adapter. (§2.1 also has a failure that registers it anyway.)
        if not reply.success and reply.loaded.get(name) != str(path):
            raise EngineRejected(reply.error_message or "load failed", engine_status=400)

    async def unload(self, name: str) -> None:
        """Unload `name`; waits for its in-flight requests (§2.2). Unknown names are a no-op."""
        reply = await self._update("/unload_lora_adapter", {"lora_name": name})
        message = reply.error_message or "unload failed"
        if not reply.success and not (name not in reply.loaded and DOES_NOT_EXIST in message):
            raise EngineRejected(message, engine_status=400)

    async def queue_depth(self) -> EngineLoad:
        """Requests running and waiting, as the scheduler counts them now (`/v1/loads`).

        The `/metrics` gauges lag: the scheduler refreshes them at a prefill (counting the
        batch before the new request joins) and then every 40 decode steps, so a request
        that just started can read as 0 running there (seen live on 0.5.23).
        """
        response = await self._call("GET", "/v1/loads", limit_s=self.timeouts.probe)
        if response.status_code != 200:
            return await super().queue_depth()  # an older server: the gauges, lagging
        ranks = decode_loads(response.content).loads
        running = sum(rank.num_running_reqs for rank in ranks)
        return EngineLoad(running, sum(rank.num_waiting_reqs for rank in ranks))

    async def _update(self, path: str, body: dict[str, Any]) -> LoRAUpdateOutput:
        """POST a load/unload; 200 and 400 both carry a `LoRAUpdateOutput`."""
        response = await self._call("POST", path, body)
        status = response.status_code
        if status in (200, 400):
            # A 500 (e.g. the dp_size assertion, §2.1) has no LoRAUpdateOutput body.
            with contextlib.suppress(msgspec.DecodeError):
                return decode_update(response.content)
        raise EngineRejected(error_message(response.content), engine_status=status)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Chat goes to the OpenAI route, completions to native `/generate`; `n > 1` is
        fanned out into single requests (module docstring)."""
        if request.choices == 1:
            async for chunk in self._generate_one(request):
                yield chunk
            return
        parts = fan_out(request)
        fan = _FanOut([part.rid for part in parts])
        self._fan_outs[request.rid] = fan
        try:
            if request.stream:
                async for chunk in self._merge_streams(parts, fan):
                    yield chunk
            else:
                for chunk in await self._gather_whole(parts):
                    yield chunk
        finally:
            self._fan_outs.pop(request.rid, None)

    async def _generate_one(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """One single-choice generation, as SGLang streams it."""
        if request.is_chat:
            body, path = chat_body(request, await self.base_model()), CHAT_PATH
        else:
            body, path = generate_body(request), GENERATE_PATH
        async with self._open_stream(request.rid, path, body, request.adapter) as response:
            if not request.stream:
                yield await self._read_whole(request, response)
                return
            if not request.is_chat:
                parse = _CumulativeText(request)
                async for chunk in self._read_stream(request.rid, response, parse):
                    yield chunk
                return
            chunks = self._read_stream(request.rid, response, self._chat_parser(request))
            async for chunk in with_usage_on_finish(chunks):
                yield chunk

    async def _merge_streams(
        self, parts: list[GenerateRequest], fan: _FanOut
    ) -> AsyncIterator[GenerateChunk]:
        """The choices' streams as one: chunks in arrival order, each with its `index` and
        the counts over all choices so far. The first error ends it and stops the rest."""
        queue: asyncio.Queue[tuple[int, GenerateChunk | None, Exception | None]]
        queue = asyncio.Queue()

        async def pump(index: int, part: GenerateRequest) -> None:
            try:
                if index > 0:
                    await fan.primed.wait()
                if fan.aborted:  # stopped before it started: it ends as aborted, unsent
                    queue.put_nowait((index, GenerateChunk(finish_reason=ABORTED), None))
                else:
                    stopped = False
                    async for chunk in self._generate_one(part):
                        fan.primed.set()
                        queue.put_nowait((index, chunk, None))
                        if fan.aborted and not stopped and chunk.finish_reason is None:
                            # `abort` came while this one was being sent, before it could
                            # be reached: stop it now (its stream then ends as aborted).
                            stopped = True
                            with contextlib.suppress(EngineError):
                                await self._abort_one(part.rid)
            except Exception as exc:  # handed to the reader, which raises it
                queue.put_nowait((index, None, exc))
            else:
                queue.put_nowait((index, None, None))
            finally:
                fan.primed.set()

        usage = _Usage(len(parts))
        tasks = [asyncio.create_task(pump(i, part)) for i, part in enumerate(parts)]
        try:
            live = len(tasks)
            while live:
                index, chunk, error = await queue.get()
                if error is not None:
                    raise error
                if chunk is None:
                    live -= 1
                    continue
                usage.add(index, chunk)
                yield replace(
                    chunk,
                    index=index,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _gather_whole(self, parts: list[GenerateRequest]) -> list[GenerateChunk]:
        """The choices of a non-streamed fan-out, sent at once: one chunk per choice in
        index order, the counts over all choices on the first (as `to_chunks` has them)."""
        tasks = [asyncio.create_task(self._whole_one(part)) for part in parts]
        try:
            chunks = await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # the first error leaves the others running: stop them
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        usage = _Usage(len(chunks))
        for index, chunk in enumerate(chunks):
            usage.add(index, chunk)
        merged = [
            replace(chunk, index=i, prompt_tokens=None, completion_tokens=None)
            for i, chunk in enumerate(chunks)
        ]
        merged[0] = replace(
            merged[0],
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )
        return merged

    async def _whole_one(self, request: GenerateRequest) -> GenerateChunk:
        """The single chunk of one non-streamed, single-choice generation."""
        # Read to the end (one chunk), so the stream's context closes here, not at GC.
        chunks = [chunk async for chunk in self._generate_one(request)]
        return chunks[0]

    def _chat_parser(self, request: GenerateRequest) -> Callable[[bytes], GenerateChunk | None]:
        """OpenAI chunk parsing, with SGLang's never-loaded message mapped to its error."""

        def parse(data: bytes) -> GenerateChunk | None:
            try:
                return parse_event(data)
            except EngineRejected as exc:
                raise _rejection(exc.detail, exc.engine_status, request.adapter) from None

        return parse

    async def _read_whole(self, request: GenerateRequest, reply: Reply) -> GenerateChunk:
        """The single chunk of a non-streamed generation."""
        try:
            content = await reply.read()
        except STREAM_BROKEN as exc:
            if self._was_aborted(request.rid):
                return GenerateChunk(finish_reason=ABORTED)
            raise EngineDied(f"sglang engine dropped {request.rid}: {exc!r}") from exc
        if request.is_chat:
            chunk = self._chat_parser(request)(content)
            return chunk or GenerateChunk(finish_reason="stop")
        return _CumulativeText(request).whole(decode_output(content))

    async def abort(self, rid: str) -> None:
        """Ask the server to abort `rid` (§5), then close our end of its stream; a fan-out
        is aborted sub-request by sub-request (SGLang wants each live rid exactly).

        Closing as well matters: aborting LoRA requests has left their HTTP responses
        hanging for minutes (sglang#29179).
        """
        fan = self._fan_outs.get(rid)
        if fan is None:
            await self._abort_one(rid)
            return
        fan.aborted = True
        fan.primed.set()  # choices not started yet start no more: they end as aborted
        await asyncio.gather(*(self._abort_one(one) for one in fan.rids))

    async def _abort_one(self, rid: str) -> None:
        response = await self._call("POST", "/abort_request", {"rid": rid, "abort_all": False})
        self._raise_for_error(response)
        await self._close_stream(rid)

    def _error_for(self, status: int, body: bytes, adapter: str | None) -> EngineError:
        """Errors before the stream starts: HTTP 400 with the engine's message (§3.3)."""
        return _rejection(error_message(body), status, adapter)


def _usage_only(chunk: GenerateChunk) -> bool:
    return (
        not chunk.text
        and chunk.finish_reason is None
        and chunk.tool_calls is None
        and chunk.logprobs is None
    )


async def with_usage_on_finish(
    chunks: AsyncIterator[GenerateChunk],
) -> AsyncIterator[GenerateChunk]:
    """Chat stream chunks, with the usage SGLang sends after the finish moved onto it.

    SGLang 0.5.23 ends a chat stream with the `finish_reason` chunk and then a separate
    `choices: []` chunk carrying the usage (vLLM puts counts on every chunk). Callers stop
    reading at the finish, so the finish chunk is held until the usage arrives.
    """
    held: GenerateChunk | None = None
    async for chunk in chunks:
        if held is not None:
            finish, held = held, None
            if _usage_only(chunk):
                yield replace(
                    finish,
                    prompt_tokens=chunk.prompt_tokens,
                    completion_tokens=chunk.completion_tokens,
                )
                continue
            yield finish  # what follows is not the usage: the finish goes as it came
        if chunk.finish_reason is not None and chunk.prompt_tokens is None:
            held = chunk
            continue
        yield chunk  # a reader that goes on drains the stream to its end, keeping the link
    if held is not None:
        yield held


class _CumulativeText:
    """Parses one `/generate` stream, turning its cumulative `text` (and logprobs) into
    deltas."""

    def __init__(self, request: GenerateRequest) -> None:
        self._adapter = request.adapter
        self._seen = 0  # characters of text already passed on
        self._tokens = 0  # tokens whose logprobs were already passed on
        self._offset = 0  # where the next token starts in the generated text

    def __call__(self, data: bytes) -> GenerateChunk | None:
        """The delta since the previous event, or None when there is nothing new."""
        chunk = self.whole(decode_output(data))
        if not chunk.text and chunk.finish_reason is None and chunk.logprobs is None:
            return None
        return chunk

    def whole(self, output: GenerateOutput) -> GenerateChunk:
        """The chunk for `output`: what is new in it since the previous one."""
        chunk = output_chunk(output, self._seen, self._adapter)
        self._seen = len(output.text)
        meta = output.meta_info
        if meta is not None and meta.output_token_logprobs is not None:
            logprobs, self._offset = completion_logprobs(meta, self._tokens, self._offset)
            self._tokens = max(self._tokens, len(meta.output_token_logprobs))
            if logprobs is not None:
                chunk = replace(chunk, logprobs=logprobs)
        return chunk
