"""Driver for an SGLang server (0.5.23), the production engine (on GPUs, and on CPU here).

Every request and response shape here is taken from docs/engines.md (§ numbers below) and
pinned by tests/unit/engines/test_sglang_contract.py. The quirks it guards against:

- On the OpenAI routes a bare adapter name as `model` silently runs the *base* model
  (§3.2), so chat requests always say `"<base>:<adapter>"`, and `lora_path` as well.
- `/abort_request` needs a live rid exactly, then aborts every rid that starts with it
  (§5): callers must use rids that are not prefixes of one another (fixed-length random
  ids are).
- A chat stream's usage comes in its own chunk after the finish (seen live); the driver
  puts it on the finish chunk, where callers stop reading.
- An unloaded adapter is not unservable: SGLang re-loads it when a request names it (§2.2,
  seen live), so the loaded set it reports is the truth placement reconciles to.
- Its streaming tool-call parser loses a call's arguments when the call's name and
  arguments reach the parser in one piece (the detokenizer sends several tokens at once
  when the reader falls behind, as on a busy host): the stream says `tool_calls` with the
  name and `""` as arguments (§11.1, reproduced offline with SGLang's own parser). A
  streamed chat request that offers tools is therefore run whole upstream and streamed to
  the client from the whole reply (`whole_upstream`).

OpenAI options (§11). Chat goes to SGLang's OpenAI route, which takes every option under
its OpenAI name and format (`openai_body` writes them). Completions go to native
`/generate`, whose wire and quirks are in `sglang_native`.

Token ids (failover, docs/failover.md). SGLang's chat route streams no ids on 0.5.23: it
refuses `return_token_ids` when streaming, and its `sglext` ids come once, after the last
token, which a stream cut mid-answer never reaches. So a chat that wants ids is rendered
by the engine itself (`/v1/tokenize` with the messages runs the chat route's own template
code) and sent to `/generate` as `input_ids`, whose events carry the output's ids; a
continuation goes to `/generate` with its ids the same way.

`n > 1` is never sent to SGLang: the driver fans it out as `n` single requests and merges
them; `sglang_fanout` does it, and says why (sglang#36894, abort by exact rid).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
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
    EngineDied,
    EngineError,
    EngineGauges,
    EngineLoad,
    EngineRejected,
    GenerateChunk,
    GenerateRequest,
)
from loraplex.serving.engines.sglang_fanout import FanOut, fan_out, gather_whole, merge_streams
from loraplex.serving.engines.sglang_native import (
    GENERATE_PATH,
    CumulativeText,
    decode_output,
    generate_body,
    rejection,
)
from loraplex.serving.engines.streams import Reply

# §2.2: the message for unloading a name that is not loaded.
DOES_NOT_EXIST = "does not exist"

replace = msgspec.structs.replace


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


#: SGLang's gauges (§6; served only with --enable-metrics), as 0.5.23 names them live.
SGLANG_GAUGES = EngineGauges(running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs")


class _RankLoad(msgspec.Struct):
    num_running_reqs: float = 0.0
    num_waiting_reqs: float = 0.0


class LoadsOutput(msgspec.Struct):
    """`GET /v1/loads`: the scheduler's own counts, one entry per data-parallel rank."""

    loads: list[_RankLoad] = []


class TokenizeOutput(msgspec.Struct):
    """`POST /v1/tokenize` with `messages`: the rendered chat prompt's token ids."""

    tokens: list[int]


decode_update = msgspec.json.Decoder(LoRAUpdateOutput).decode
decode_loads = msgspec.json.Decoder(LoadsOutput).decode
decode_tokenized = msgspec.json.Decoder(TokenizeOutput).decode


def sglang_model(base: str, adapter: str | None) -> str:
    """The OpenAI `model` that selects `adapter` on SGLang: `"<base>:<adapter>"`, never bare."""
    if adapter is None:
        return base
    if not adapter:
        raise ValueError("an empty adapter name would run the base model")
    return f"{base}:{adapter}"


def chat_body(request: GenerateRequest, base: str) -> dict[str, Any]:
    """The `/v1/chat/completions` body: the adapter in `model` and `lora_path`, our `rid`.

    Every option goes under its OpenAI name and format, which SGLang's chat route takes
    as it is (§11), so `openai_body` writes them all.
    """
    # Running counts on every chunk (0.5.23 accepts vLLM's option), so a stream cut in the
    # middle is billed what it cost; the last chunk still repeats the totals.
    body = openai_body(request, sglang_model(base, request.adapter), continuous_usage_stats=True)
    body.pop("n", None)  # fanned out by the driver, never sent (sglang_fanout)
    if request.adapter is not None:
        body["lora_path"] = request.adapter  # same choice as `model`, in case parsing changes
    body["rid"] = request.rid
    return body


class SglangDriver(HttpDriver):
    """An `EngineDriver` for one SGLang server."""

    kind = "sglang"
    gauges = SGLANG_GAUGES
    # `--max-loras-per-batch` counts base-model requests as one of its slots (seen live on
    # 0.5.23): a batch with base requests has one adapter slot fewer.
    base_takes_a_slot = True
    # `/generate` returns the prompt's and the output's ids and takes `input_ids`.
    continues_by_token_ids = True

    def __init__(
        self,
        url: str,
        *,
        base_model: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeouts: DriverTimeouts | None = None,
    ) -> None:
        # §2.5: behind --api-key every route but health and metrics wants the key
        super().__init__(
            url, base_model=base_model, client=client, timeouts=timeouts, api_key=api_key
        )
        self._fan_outs: dict[str, FanOut] = {}

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
        fanned out into single requests (`sglang_fanout`)."""
        if request.choices == 1:
            async for chunk in self._generate_one(request):
                yield chunk
            return
        parts = fan_out(request)
        fan = FanOut([part.rid for part in parts])
        self._fan_outs[request.rid] = fan
        try:
            if request.stream:
                async for chunk in merge_streams(parts, fan, self._generate_one, self._abort_one):
                    yield chunk
            else:
                for chunk in await gather_whole(parts, self._generate_one):
                    yield chunk
        finally:
            self._fan_outs.pop(request.rid, None)

    async def _generate_one(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """One single-choice generation, as SGLang streams it."""
        if request.stream and whole_upstream(request):
            async for chunk in self._generate_one(msgspec.structs.replace(request, stream=False)):
                yield chunk
            return
        if native(request):
            body, path = generate_body(request, await self._input_ids(request)), GENERATE_PATH
        else:
            body, path = chat_body(request, await self.base_model()), CHAT_PATH
        async with self._open_stream(request.rid, path, body, request.adapter) as response:
            if not request.stream:
                yield await self._read_whole(request, response)
                return
            if native(request):
                parse = CumulativeText(request)
                async for chunk in self._read_stream(request.rid, response, parse):
                    yield chunk
                return
            chunks = self._read_stream(request.rid, response, self._chat_parser(request))
            async for chunk in with_usage_on_finish(chunks):
                yield chunk

    async def _input_ids(self, request: GenerateRequest) -> list[int] | None:
        """The prompt as token ids where it goes as ids: a continuation's, or a chat's as
        the chat route would render it; None for a completion's text."""
        if request.continue_ids is not None:
            return request.continue_ids
        if not request.is_chat:
            return None
        body: dict[str, Any] = {"model": await self.base_model(), "messages": request.messages}
        options = request.options
        if options is not None and options.tools:  # a template may render tools
            body.update(tools=options.tools, tool_choice=options.tool_choice)
        response = await self._call("POST", "/v1/tokenize", body)
        if response.status_code != 200:
            raise self._error_for(response.status_code, response.content, request.adapter)
        return decode_tokenized(response.content).tokens

    def _chat_parser(self, request: GenerateRequest) -> Callable[[bytes], GenerateChunk | None]:
        """OpenAI chunk parsing, with SGLang's never-loaded message mapped to its error."""

        def parse(data: bytes) -> GenerateChunk | None:
            try:
                return parse_event(data)
            except EngineRejected as exc:
                raise rejection(exc.detail, exc.engine_status, request.adapter) from None

        return parse

    async def _read_whole(self, request: GenerateRequest, reply: Reply) -> GenerateChunk:
        """The single chunk of a non-streamed generation."""
        try:
            content = await reply.read()
        except STREAM_BROKEN as exc:
            if self._was_aborted(request.rid):
                return GenerateChunk(finish_reason=ABORTED)
            raise EngineDied(f"sglang engine dropped {request.rid}: {exc!r}") from exc
        if native(request):
            return CumulativeText(request).whole(decode_output(content))
        chunk = self._chat_parser(request)(content)
        return chunk or GenerateChunk(finish_reason="stop")

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
        await fan.abort(self._abort_one)

    async def _abort_one(self, rid: str) -> None:
        response = await self._call("POST", "/abort_request", {"rid": rid, "abort_all": False})
        self._raise_for_error(response)
        await self._close_stream(rid)

    def _error_for(self, status: int, body: bytes, adapter: str | None) -> EngineError:
        """Errors before the stream starts: HTTP 400 with the engine's message (§3.3)."""
        return rejection(error_message(body), status, adapter)


def native(request: GenerateRequest) -> bool:
    """Whether `request` goes to native `/generate`: a completion, a continuation, or a
    chat that wants token ids (the chat route streams none)."""
    return not request.is_chat or request.want_token_ids or request.continue_ids is not None


def whole_upstream(request: GenerateRequest) -> bool:
    """Whether a streamed request must run whole on SGLang: a chat that may answer with a
    tool call, whose streamed arguments SGLang can lose (see the module's docstring)."""
    options = request.options
    if not request.is_chat or options is None or not options.tools:
        return False
    return options.tool_choice != "none"


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
