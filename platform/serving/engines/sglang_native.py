"""SGLang's native `/generate` wire (0.5.23), where the SGLang driver sends completions.

Every shape here is taken from docs/engines.md (§ numbers below) and pinned by
tests/unit/engines/test_sglang_contract.py. The quirks it guards against:

- `/generate` streams *cumulative* text (§5); `CumulativeText` turns it into deltas.
- A streamed `/generate` error arrives as an SSE event after HTTP 200 (§3.3).
- `output_ids` are cumulative too; with `return_prompt_token_ids` every event repeats the
  prompt's ids. Like vLLM, SGLang holds back the text of tokens that end in half a
  character while their ids already came (seen live on 0.5.23).

Token ids (for failover, docs/failover.md): a request that wants them asks for the prompt's
ids and gets each chunk's new output ids; a continuation sends `input_ids` (the prompt and
the answer so far) in place of `text`, which SGLang takes as they are (no template, no BOS).

OpenAI options (§11) become `sampling_params` keys (penalties and `logit_bias` as they
are; `response_format` as `json_schema`, a JSON *string*: the schema itself, or
`{"type": "object"}` for `json_object`, as SGLang's own OpenAI routes do) and top-level
logprob switches; its `[logprob, token_id, text]` triples become OpenAI completions
logprobs. Tools are chat-only and ignored on completions.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loraplex.serving.engines.protocol import (
    AdapterNotLoaded,
    EngineError,
    EngineRejected,
    GenerateChunk,
    GenerateRequest,
)

GENERATE_PATH = "/generate"
# §3.3: the message for a name the server never loaded (a previously loaded one is reloaded).
NEVER_LOADED = "has never been loaded"
# §11: what SGLang's own OpenAI routes constrain `{"type": "json_object"}` to.
JSON_OBJECT_SCHEMA = '{"type": "object"}'

replace = msgspec.structs.replace
encode_json = msgspec.json.Encoder().encode


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
    output_ids: list[int] | None = None  # cumulative, like `text`
    prompt_token_ids: list[int] | None = None  # only with `return_prompt_token_ids`


decode_output = msgspec.json.Decoder(GenerateOutput).decode


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
    if request.max_tokens is not None or request.is_chat:
        # A chat without `max_tokens` runs to the context's end, as on SGLang's chat route
        # (which sends null); left out, `/generate` would stop at its default of 128.
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
        # `n` is never sent: the driver fans choices out itself (sglang_fanout).
        for key in ("presence_penalty", "frequency_penalty", "logit_bias"):
            value = getattr(options, key)
            if value is not None:
                params[key] = value  # same names and formats as OpenAI's (§11)
        schema = json_schema(options.response_format)
        if schema is not None:
            params["json_schema"] = schema
    return params


def generate_body(request: GenerateRequest, input_ids: list[int] | None = None) -> dict[str, Any]:
    """The `/generate` body for a completion request (§3.1, §5, §11), or for a prompt that
    is already token ids (`input_ids`: a rendered chat, or a continuation)."""
    body: dict[str, Any] = {"rid": request.rid}
    if input_ids is not None:
        body["input_ids"] = input_ids
    else:
        body["text"] = request.prompt
    body["sampling_params"] = sampling_params(request)
    body["stream"] = request.stream
    if request.want_token_ids:
        body["return_prompt_token_ids"] = True  # the output's ids come on every event
    if request.adapter is not None:
        body["lora_path"] = request.adapter  # an adapter *name*, despite the field's name
    options = request.options
    if options is not None and options.logprobs:
        body["return_logprob"] = True
        body["logprob_start_len"] = -1  # output tokens only, none of the prompt's
        body["top_logprobs_num"] = options.top_logprobs or 0
        body["return_text_in_logprobs"] = True  # each token's text, not just its id
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
        raise rejection(output.error.message, output.error.code or 400, adapter)
    meta = output.meta_info or _MetaInfo()
    finish = meta.finish_reason.type if meta.finish_reason else None
    return GenerateChunk(output.text[seen:], finish, meta.prompt_tokens, meta.completion_tokens)


def rejection(message: str, status: int, adapter: str | None) -> EngineError:
    """A never-loaded adapter is `AdapterNotLoaded`; any other refusal is `EngineRejected`.

    SGLang words its refusals alike on every route, so the driver maps the chat route's
    with this too.
    """
    if adapter is not None and NEVER_LOADED in message:
        return AdapterNotLoaded(adapter, message)
    return EngineRejected(message, engine_status=status)


class CumulativeText:
    """Parses one `/generate` stream, turning its cumulative `text` (and logprobs) into
    deltas."""

    def __init__(self, request: GenerateRequest) -> None:
        self._adapter = request.adapter
        self._want_ids = request.want_token_ids
        self._seen = 0  # characters of text already passed on
        self._tokens = 0  # tokens whose logprobs were already passed on
        self._offset = 0  # where the next token starts in the generated text
        self._ids = 0  # output token ids already passed on
        self._prompt_ids_sent = False

    def __call__(self, data: bytes) -> GenerateChunk | None:
        """The delta since the previous event, or None when there is nothing new."""
        chunk = self.whole(decode_output(data))
        if (
            not chunk.text
            and chunk.finish_reason is None
            and chunk.logprobs is None
            and not chunk.token_ids
            and chunk.prompt_token_ids is None
        ):
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
        if self._want_ids:
            chunk = self._with_ids(chunk, output)
        return chunk

    def _with_ids(self, chunk: GenerateChunk, output: GenerateOutput) -> GenerateChunk:
        """`chunk` with the output ids new since the last event, and the prompt's once."""
        ids = output.output_ids or []
        new_ids, self._ids = ids[self._ids :], max(self._ids, len(ids))
        prompt_ids = None
        if not self._prompt_ids_sent and output.prompt_token_ids is not None:
            prompt_ids, self._prompt_ids_sent = output.prompt_token_ids, True
        return replace(chunk, token_ids=new_ids, prompt_token_ids=prompt_ids)
