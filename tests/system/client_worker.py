"""The client host's HTTP agent: run inside the client namespace, one JSON command per line,
answered in any order (each names its `id`).

Each stdin line is a request (`{"op": "request"|"stream", "method", "url", "headers",
"json", "timeout"}`, and for a stream `disconnect_after` and `read_delay_s`); each stdout line is what a user's client saw: the status, headers and
body, or the SSE events of a stream, or the transport error. Keeping one process alive
avoids a Python start per request, so recovery times can be measured to a fraction of a
second.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx


def request(http: httpx.Client, command: dict[str, Any]) -> dict[str, Any]:
    """One plain request; the reply's status, headers and text."""
    started = time.monotonic()
    # `files`: [field, file name, path on disk] triples, sent as multipart form data.
    files = [
        (field, (name, Path(path).read_bytes())) for field, name, path in command.get("files") or []
    ]
    response = http.request(
        command.get("method", "GET"),
        command["url"],
        headers=command.get("headers"),
        json=command.get("json"),
        files=files or None,
        timeout=command.get("timeout", 10.0),
    )
    return {
        "status": response.status_code,
        "headers": dict(response.headers),
        "text": response.text,
        "elapsed_s": time.monotonic() - started,
    }


def stream(http: httpx.Client, command: dict[str, Any]) -> dict[str, Any]:
    """One SSE request read to its end; the status, every `data:` payload and the timings."""
    started = time.monotonic()
    events: list[str] = []
    arrived_s: list[float] = []  # each event's arrival, from the start
    first_event_s, error = None, None
    with http.stream(
        command.get("method", "POST"),
        command["url"],
        headers=command.get("headers"),
        json=command.get("json"),
        timeout=command.get("timeout", 30.0),
    ) as response:
        if response.status_code != 200:
            response.read()
            return {"status": response.status_code, "text": response.text, "events": []}
        # A user who leaves after `disconnect_after` events closes the connection; a slow
        # reader waits `read_delay_s` before each line.
        leave_after, delay = command.get("disconnect_after"), command.get("read_delay_s", 0)
        try:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(line[5:].strip())
                    arrived_s.append(time.monotonic() - started)
                    first_event_s = first_event_s or time.monotonic() - started
                    if leave_after is not None and len(events) >= leave_after:
                        break  # leaving the `with` closes the connection mid-stream
                if delay:
                    time.sleep(delay)
        except httpx.HTTPError as exc:  # the connection broke mid-stream: keep what came
            error = f"{type(exc).__name__}: {exc}"
    return {
        "status": 200,
        "events": events,
        "arrived_s": arrived_s,
        "error": error,
        "first_event_s": first_event_s,
        "elapsed_s": time.monotonic() - started,
    }


def run(http: httpx.Client, command: dict[str, Any]) -> dict[str, Any]:
    """One command's reply, tagged with its id; a transport error is a reply too."""
    try:
        reply = stream(http, command) if command["op"] == "stream" else request(http, command)
    except httpx.HTTPError as exc:
        reply = {"status": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"id": command["id"], **reply}


def main() -> None:
    """Serve commands from stdin until it closes, each on its own thread (streams overlap)."""
    lock = threading.Lock()
    with httpx.Client(limits=httpx.Limits(max_connections=64)) as http:

        def answer(command: dict[str, Any]) -> None:
            line = json.dumps(run(http, command)) + "\n"
            with lock:
                sys.stdout.write(line)
                sys.stdout.flush()

        for line in sys.stdin:
            threading.Thread(target=answer, args=(json.loads(line),), daemon=True).start()


if __name__ == "__main__":
    main()
