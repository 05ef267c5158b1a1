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

Run: `python fake_engine.py --host IP --port 8000 --name engine1 --model loraplex-fake`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

STATS = {"held": 0, "streaming": 0, "served": 0}
LOADED: dict[str, str] = {}  # adapter name -> the directory it was loaded from


def pacing(body: dict[str, Any], name: str) -> tuple[int, float, bool]:
    """(tokens, seconds between tokens, held before the first token) from the request."""
    messages = body.get("messages") or [{"content": body.get("prompt", "")}]
    text = str(messages[-1].get("content", ""))
    tokens = int(m.group(1)) if (m := re.search(r"tokens=(\d+)", text)) else 3
    every = float(m.group(1)) if (m := re.search(r"every=([\d.]+)", text)) else 0.01
    held = re.search(rf"hold={re.escape(name)}\b", text) is not None
    return min(tokens, int(body.get("max_tokens") or tokens)), every, held


def chunk(name: str, model: str, content: str | None, finish: str | None, n: int) -> bytes:
    """One SSE chunk of a chat stream, with running usage (continuous_usage_stats)."""
    document = {
        "id": "fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": n},
    }
    return f"data: {json.dumps(document)}\n\n".encode()


async def send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One HTTP/1.1 chunk; raises when the client went away."""
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def generate(writer: asyncio.StreamWriter, body: dict[str, Any], args: Any) -> None:
    """Stream (or answer whole) one generation, paced by its prompt."""
    tokens, every, held = pacing(body, args.name)
    if not body.get("stream"):
        await asyncio.sleep(tokens * every)
        reply = {
            "id": "fake",
            "object": "chat.completion",
            "model": args.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"{args.name} " * tokens},
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
        for n in range(1, tokens + 1):
            await send_chunk(writer, chunk(args.name, args.model, f"{args.name} ", None, n))
            await asyncio.sleep(every)
        await send_chunk(writer, chunk(args.name, args.model, None, "length", tokens))
        await send_chunk(writer, b"data: [DONE]\n\n")
        await send_chunk(writer, b"")
    finally:
        STATS["streaming"] -= 1
        STATS["served"] += 1


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
        await respond(writer, 200, b"", "text/plain")
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
        if model != args.model and model not in LOADED:
            error = {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
            await respond(writer, 404, json.dumps(error).encode(), "application/json")
            return
        await generate(writer, body, args)
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
    finally:
        writer.close()


async def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, args), args.host, args.port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
