"""Tenant B, in a process of its own: streams back to back and times every pause it sees.

Run as `python -m tests.security.probe URL KEY MODEL`. It prints `ready` once the first
stream has its first chunk, streams until its standard input closes, then prints one JSON
line: the longest pause (between two chunks of a stream, or from a request to its first
chunk) and how many chunks and streams it saw. A process of its own, so that building and
sending an attack in the test process never delays B's reading.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx

PACE = "tokens=60 every=0.01"  # the stand-in engine streams 60 chunks, 10 ms apart


def main() -> None:
    url, key, model = sys.argv[1:4]
    stopped = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stopped.set()), daemon=True).start()
    longest, chunks, streams, errors = 0.0, 0, 0, 0
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": PACE}]}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while not stopped.is_set():
            last = time.perf_counter()
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    errors += 1
                    response.read()
                    time.sleep(0.05)
                    continue
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    now = time.perf_counter()
                    longest = max(longest, now - last)
                    last = now
                    chunks += 1
                    if chunks == 1:
                        print("ready", flush=True)
            streams += 1
    report = {"longest_pause_s": longest, "chunks": chunks, "streams": streams, "errors": errors}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
