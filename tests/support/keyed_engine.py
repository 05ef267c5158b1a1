"""The drills' stand-in engine (tests/system/fake_engine.py) asking for an API key, as vLLM
started with `--api-key` (or `VLLM_API_KEY`) does.

The key comes from `VLLM_API_KEY` in the environment, never the command line. Every `/v1`
route answers 401 `{"error": "Unauthorized"}` without `Authorization: Bearer <key>`;
`/health`, `/metrics` and `/stats` stay open, as on vLLM. Everything else is the stand-in's:
run it with the stand-in's arguments (`--host --port --name --model`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "system" / "fake_engine.py"
_spec = importlib.util.spec_from_file_location("fake_engine", FAKE_ENGINE)
assert _spec is not None and _spec.loader is not None
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)
UNAUTHORIZED = b'{"error": "Unauthorized"}'


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, args: Any
) -> None:
    """The stand-in's requests on one kept-alive connection, each `/v1` one with the key."""
    expected = f"Bearer {os.environ['VLLM_API_KEY']}"
    try:
        while line := await reader.readline():
            method, path, _ = line.decode().split(" ", 2)
            length, authorization = 0, ""
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = header.decode().partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value.strip())
                elif key.strip().lower() == "authorization":
                    authorization = value.strip()
            raw = await reader.readexactly(length) if length else b""
            path = path.split("?")[0]
            if path.startswith("/v1") and authorization != expected:
                await fake.respond(writer, 401, UNAUTHORIZED, "application/json")
                continue
            await fake.route(writer, method, path, raw, args)
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


if __name__ == "__main__":
    if not os.environ.get("VLLM_API_KEY"):
        sys.exit("set VLLM_API_KEY")
    fake.serve_connection = serve_connection  # main() looks it up when a client connects
    asyncio.run(fake.main())
