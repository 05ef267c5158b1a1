"""What an engine says about itself: its kind, its model, its LoRA switch, rank limit and slots.

Registration holds an operator's (or an agent's) description of an engine against this
(`loraplex.control.engines.facts_check`), so an engine registered as the wrong kind or with
slots it does not have is refused before it takes a request, instead of failing every one.

- SGLang answers `GET /server_info` with its start-up arguments: `enable_lora`,
  `max_lora_rank` (null when it was inferred from start-up adapters), `max_loras_per_batch`
  (the GPU slots) and `max_loaded_loras` (the host slots) (docs/engines.md §2.4), and the
  model it serves: `served_model_name` and `model_path`.
- vLLM has no such route (404). Its served model list (`/v1/models`: the base model's cards
  have no `parent`, each with the folder it was loaded from as `root`) names its model. Its
  `/metrics` page carries `vllm:lora_requests_info` with a `max_lora` label: its
  `--max-loras`, the GPU slots. Its rank limit and CPU slots are not reported; the agent that
  started it knows them from the arguments it passed.

A figure the engine does not report is None and is not checked. Each answer read here is
bounded: an engine URL is an operator's input, and what answers there may be anything.
"""

from __future__ import annotations

import re

import httpx
import msgspec

MAX_ANSWER_BYTES = 1 << 20  # /server_info is a few KB; a vLLM metrics page ~100 KB
_MAX_LORA = re.compile(r'^vllm:lora_requests_info\{[^}]*\bmax_lora="(\d{1,6})"', re.MULTILINE)


class ReportedFacts(msgspec.Struct, frozen=True, kw_only=True):
    """An engine's own account of itself; None: not reported."""

    kind: str | None = None  # "sglang" | "vllm"
    # The names it serves its base model under (`--served-model-name`), and the last part of
    # the path it loaded it from (`--model-path` / `--model`); None: not reported.
    served_models: tuple[str, ...] | None = None
    model_folders: tuple[str, ...] = ()
    lora_enabled: bool | None = None
    max_lora_rank: int | None = None
    gpu_slots: int | None = None
    host_slots: int | None = None


class EngineSilent(Exception):
    """The engine did not answer, so nothing could be read (not a mismatch)."""


async def read_reported_facts(client: httpx.AsyncClient, timeout_s: float) -> ReportedFacts:
    """Ask the engine behind `client` (its base URL and key set) what it was started with."""
    status, body = await _get(client, "/server_info", timeout_s)
    if status == 200:
        info = _json_object(body)
        if info is not None and "max_loras_per_batch" in info:
            return _sglang_facts(info)
    status, body = await _get(client, "/v1/models", timeout_s)
    if status != 200:
        return ReportedFacts()  # neither shape: nothing to hold a claim against
    served, folders = _base_cards(_json_object(body))
    status, body = await _get(client, "/metrics", timeout_s)
    match = _MAX_LORA.search(body.decode("utf-8", "replace")) if status == 200 else None
    return ReportedFacts(
        kind="vllm",
        served_models=served,
        model_folders=folders,
        gpu_slots=int(match.group(1)) if match else None,
    )


def _base_cards(
    listing: dict[str, object] | None,
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(served names, model folders) of the base model cards of a `/v1/models` answer: the
    cards without a `parent` (an adapter's names its base model). (None, ()): not that shape."""
    cards = listing.get("data") if listing is not None else None
    if not isinstance(cards, list):
        return None, ()
    served, folders = [], []
    for card in cards:
        if not isinstance(card, dict) or card.get("parent") is not None:
            continue
        if isinstance(card.get("id"), str):
            served.append(card["id"])
        folders.append(folder_name(card.get("root")))
    return tuple(served), tuple(f for f in folders if f)


def folder_name(path: object) -> str:
    """The last part of a model's path or URI ("" for none): `/models/Llama-3.1-8B/` and
    `s3://bucket/base-models/Llama-3.1-8B` both give `Llama-3.1-8B`."""
    if not isinstance(path, str):
        return ""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return "" if ":" in name else name  # `generated://` names no folder


def _sglang_facts(info: dict[str, object]) -> ReportedFacts:
    served = info.get("served_model_name")
    return ReportedFacts(
        kind="sglang",
        served_models=(served,) if isinstance(served, str) else None,
        model_folders=tuple(f for f in (folder_name(info.get("model_path")),) if f),
        lora_enabled=info.get("enable_lora") if isinstance(info.get("enable_lora"), bool) else None,
        max_lora_rank=_count(info.get("max_lora_rank")),
        gpu_slots=_count(info.get("max_loras_per_batch")),
        host_slots=_count(info.get("max_loaded_loras")),
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_object(body: bytes) -> dict[str, object] | None:
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


async def _get(client: httpx.AsyncClient, path: str, timeout_s: float) -> tuple[int, bytes]:
    """(status, at most MAX_ANSWER_BYTES of the body); EngineSilent when it does not answer."""
    try:
        async with client.stream("GET", path, timeout=timeout_s) as response:
            body = bytearray()
            async for block in response.aiter_bytes():
                body += block
                if len(body) > MAX_ANSWER_BYTES:
                    return 413, b""  # too big to be what we asked for: not this shape
            return response.status_code, bytes(body)
    except httpx.HTTPError as exc:
        raise EngineSilent(f"{type(exc).__name__}") from exc
