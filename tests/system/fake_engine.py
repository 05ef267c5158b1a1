"""A stand-in engine host speaking vLLM's OpenAI routes, paced by the prompt, on plain asyncio.

The drills need streams that stay in flight long enough to kill something under them, on a
2-core machine where a real engine would take minutes to start. The last user message (or
the prompt) paces the reply: `tokens=30 every=0.1 hold=engine1` streams 30 tokens 0.1 s
apart, and an engine named `engine1` holds it before its first token until killed. Each
token is `<engine name>` so the client sees which host served it. `GET /stats` tells the
drill how many requests are held and how many are streaming.

Adapters behave as on vLLM with runtime LoRA updating: `/v1/load_lora_adapter` takes one
from a directory that must hold its files, `/v1/models` lists what is loaded (cards with a
parent), and a request naming an adapter that is not loaded is a 404. A restarted stand-in
holds none, as a restarted engine does.

`POST /misbehave {"model": <adapter name>, "status": 500}` makes every generation of that
adapter answer with that status, `{"model": ..., "first_token_s": 0.5}` holds each one that
long before it answers, `{"model": ..., "say": "wrong"}` makes each token `wrong` instead of
the engine's name (the canary drill's bad versions); `{"model": ...}` alone heals it.

`greedy` in the prompt makes the answer the same on every engine, as a greedy answer is:
each token is a function of the token ids before it (`t<id> `); `die=N` makes the engine
that serves it drop the connection after N tokens (no finish, no end of the chunked body),
as a killed engine does. With `return_token_ids` (vLLM's option) a greedy stream's first
chat chunk carries `prompt_token_ids` and each chunk its `token_ids`; `/v1/completions` takes a prompt
of token ids and continues from them, so the gateway's failover can continue an answer here.

SIGTERM stops it as SGLang stops (docs/engines.md §6): `/health` answers 503 at once, new
generations are refused with a 503, the streams in flight run to their end, then it exits.
`/metrics` counts them (running) throughout, as the engines' queue gauges do.

Run: `python fake_engine.py --host IP --port 8000 --name engine1 --model loraplex-fake`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

STATS = {"held": 0, "streaming": 0, "served": 0, "refused": 0}
STOPPING = asyncio.Event()  # SIGTERM came: refuse new work, finish what is in flight
LOADED: dict[str, str] = {}  # adapter name -> the directory it was loaded from
MISBEHAVING: dict[str, dict[str, Any]] = {}  # adapter name -> {"status": ..., "first_token_s"}


class Dropped(Exception):
    """The stream was told to die: the connection is cut with no proper end."""


def prompt_text(body: dict[str, Any]) -> str:
    """The last user message, or the prompt when it is text."""
    messages = body.get("messages") or [{"content": body.get("prompt", "")}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else ""


def prompt_ids(body: dict[str, Any]) -> list[int]:
    """The prompt as token ids: the ids a continuation sends, or one id per character (a
    `die=N` is a fault to inject, not part of the prompt: the answer stays the same)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return [int(i) for i in prompt]
    return [ord(c) % 1000 for c in re.sub(r"\s*die=\d+", "", prompt_text(body))]


def greedy_token(ids: list[int]) -> int:
    """The next token of a greedy answer: it depends on every id before it, in order."""
    value = len(ids)
    for token in ids:
        value = (value * 131 + token) % 65_521
    return value % 1000


def pacing(body: dict[str, Any], name: str) -> tuple[int, float, bool]:
    """(tokens, seconds between tokens, held before the first token) from the request."""
    text = prompt_text(body)
    tokens = int(m.group(1)) if (m := re.search(r"tokens=(\d+)", text)) else 3
    if isinstance(body.get("prompt"), list):  # a continuation: as many as it asks for
        tokens = int(body.get("max_tokens") or tokens)
    every = float(m.group(1)) if (m := re.search(r"every=([\d.]+)", text)) else 0.01
    held = re.search(rf"hold={re.escape(name)}\b", text) is not None
    return min(tokens, int(body.get("max_tokens") or tokens)), every, held


def chunk(
    model: str,
    content: str | None,
    finish: str | None,
    n: int,
    extra: dict[str, Any],
    **top: Any,
) -> bytes:
    """One SSE chunk of a chat stream, with running usage (continuous_usage_stats); `extra`
    goes on the choice (its token ids), `top` on the chunk (the prompt's)."""
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish, **extra}
    document = {
        "id": "fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 3, "completion_tokens": n},
        **top,
    }
    return f"data: {json.dumps(document)}\n\n".encode()


async def send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One HTTP/1.1 chunk; raises when the client went away."""
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def generate(
    writer: asyncio.StreamWriter, body: dict[str, Any], args: Any, say: str | None = None
) -> None:
    """Stream (or answer whole) one generation, paced by its prompt; each token is the
    engine's name, or `say`."""
    tokens, every, held = pacing(body, args.name)
    word = say or args.name
    if not body.get("stream"):
        await asyncio.sleep(tokens * every)
        reply = {
            "id": "fake",
            "object": "chat.completion",
            "model": args.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": whole_answer(body, word, tokens)},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": tokens},
        }
        await respond(writer, 200, json.dumps(reply).encode(), "application/json")
        return
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    if held:
        STATS["held"] += 1
        try:
            await asyncio.sleep(3600)  # until this engine is killed
        finally:
            STATS["held"] -= 1
    STATS["streaming"] += 1
    try:
        await stream_tokens(writer, body, args.model, word, tokens, every)
    finally:
        STATS["streaming"] -= 1
        STATS["served"] += 1


def whole_answer(body: dict[str, Any], word: str, tokens: int) -> str:
    """A non-streamed answer: greedy tokens for a `greedy` prompt, else `word` repeated."""
    if "greedy" not in prompt_text(body):
        return f"{word} " * tokens
    ids, pieces = prompt_ids(body), []
    for _ in range(tokens):
        ids.append(greedy_token(ids))
        pieces.append(f"t{ids[-1]} ")
    return "".join(pieces)


async def stream_tokens(
    writer: asyncio.StreamWriter, body: dict[str, Any], model: str, word: str, tokens: int,
    every: float,
) -> None:  # fmt: skip
    """The chunks of one stream: `word` or greedy tokens, cut after `die=N` tokens."""
    text = prompt_text(body)
    greedy = "greedy" in text or isinstance(body.get("prompt"), list)
    die = int(m.group(1)) if (m := re.search(r"die=(\d+)", text)) else None
    # Only a greedy answer is the same on every engine, so only its ids are given: the
    # drills' answers (each token the engine's name) end at a kill as before failover.
    with_ids = greedy and bool(body.get("return_token_ids"))
    ids = prompt_ids(body)
    if with_ids and body.get("messages") is not None:  # vLLM: on the role chunk
        await send_chunk(writer, chunk(model, "", None, 0, {}, prompt_token_ids=list(ids)))
    for n in range(1, tokens + 1):
        if n - 1 == die:
            raise Dropped
        token = greedy_token(ids) if greedy else 0
        ids.append(token)
        piece = f"t{token} " if greedy else f"{word} "
        extra = {"token_ids": [token]} if with_ids else {}
        await send_chunk(writer, chunk(model, piece, None, n, extra))
        await asyncio.sleep(every)
    await send_chunk(writer, chunk(model, None, "length", tokens, {}))
    await send_chunk(writer, b"data: [DONE]\n\n")
    await send_chunk(writer, b"")


async def respond(writer: asyncio.StreamWriter, status: int, body: bytes, media: str) -> None:
    """A whole response with a length, on a kept-alive connection."""
    head = f"HTTP/1.1 {status} X\r\ncontent-type: {media}\r\ncontent-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


async def route(
    writer: asyncio.StreamWriter, method: str, path: str, raw: bytes, args: Any
) -> None:
    """Answer one request."""
    if path == "/health":
        await respond(writer, 503 if STOPPING.is_set() else 200, b"", "text/plain")
    elif path == "/v1/models":
        cards = [{"id": args.model, "object": "model", "root": args.model, "parent": None}]
        cards += [
            {"id": name, "object": "model", "root": root, "parent": args.model}
            for name, root in LOADED.items()
        ]
        await respond(writer, 200, json.dumps({"data": cards}).encode(), "application/json")
    elif path == "/metrics":
        running = STATS["held"] + STATS["streaming"]
        text = f"vllm:num_requests_running {running}\nvllm:num_requests_waiting 0\n"
        await respond(writer, 200, text.encode(), "text/plain")
    elif path == "/stats":
        stats = {**STATS, "loaded": sorted(LOADED)}
        await respond(writer, 200, json.dumps(stats).encode(), "application/json")
    elif method == "POST" and path == "/v1/load_lora_adapter":
        status, text = load(json.loads(raw or b"{}"))
        await respond(writer, status, text.encode(), "text/plain")
    elif method == "POST" and path == "/v1/unload_lora_adapter":
        name = json.loads(raw or b"{}").get("lora_name", "")
        found = LOADED.pop(name, None) is not None
        await respond(writer, 200 if found else 404, b"", "text/plain")
    elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
        body = json.loads(raw or b"{}")
        model = body.get("model")
        if STOPPING.is_set():
            STATS["refused"] += 1
            error = {"error": {"message": "The server is shutting down.", "code": 503}}
            await respond(writer, 503, json.dumps(error).encode(), "application/json")
            return
        if model != args.model and model not in LOADED:
            error = {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
            await respond(writer, 404, json.dumps(error).encode(), "application/json")
            return
        fault = MISBEHAVING.get(str(model), {})
        await asyncio.sleep(float(fault.get("first_token_s", 0)))
        if "status" in fault:
            error = {"error": {"message": "the adapter misbehaves", "code": fault["status"]}}
            await respond(
                writer, int(fault["status"]), json.dumps(error).encode(), "application/json"
            )
            return
        await generate(writer, body, args, fault.get("say"))
    elif method == "POST" and path == "/misbehave":
        fault = json.loads(raw or b"{}")
        MISBEHAVING[str(fault.pop("model", ""))] = fault
        await respond(writer, 200, b"{}", "application/json")
    else:
        await respond(writer, 404, b"{}", "application/json")


def load(body: dict[str, Any]) -> tuple[int, str]:
    """vLLM's answers to a load: 400 for a name it holds or a directory without an adapter."""
    name, directory = str(body.get("lora_name", "")), Path(str(body.get("lora_path", "")))
    if name in LOADED:
        return 400, f"The lora adapter '{name}' has already been loaded."
    if not (directory / "adapter_config.json").is_file():
        return 400, f"No adapter found for {name}"
    LOADED[name] = str(directory)
    return 200, f"Success: LoRA adapter '{name}' added successfully."


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, args: Any
) -> None:
    """Requests on one kept-alive connection, until the client closes it."""
    try:
        while line := await reader.readline():
            method, path, _ = line.decode().split(" ", 2)
            length = 0
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = header.decode().partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value.strip())
            raw = await reader.readexactly(length) if length else b""
            await route(writer, method, path.split("?")[0], raw, args)
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    except Dropped:
        writer.transport.abort()  # a reset, not an orderly end: the engine died
    finally:
        writer.close()


async def main() -> None:
    """Serve until killed, or until SIGTERM and the last stream in flight ended."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, args), args.host, args.port
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, STOPPING.set)
    async with server:
        await STOPPING.wait()
        while STATS["streaming"] or STATS["held"]:
            await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main())
