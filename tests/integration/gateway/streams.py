"""Helpers for reading SSE the way a real (and sometimes misbehaving) client does."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


@dataclass
class Event:
    """One SSE event as received."""

    id: int | None
    data: str

    def json(self) -> Any:
        """The event's JSON payload."""
        return json.loads(self.data)


def parse_events(raw: bytes) -> list[Event]:
    """Split an SSE byte stream into events (comments and blank lines dropped)."""
    events = []
    for block in raw.decode().split("\n\n"):
        event_id, data = None, []
        for line in block.splitlines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            events.append(Event(event_id, "\n".join(data)))
    return events


def raw_stream_request(
    url: str, key: str, body: dict[str, Any], rcvbuf: int = 4096
) -> socket.socket:
    """Open a socket with a tiny receive buffer and send a streaming chat request on it."""
    parts = urlparse(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((parts.hostname, parts.port))
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.hostname}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


def read_all(sock: socket.socket, timeout_s: float = 60.0) -> bytes:
    """Read until the server closes the connection; returns the body after the headers."""
    sock.settimeout(timeout_s)
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            break
        chunks.append(data)
    raw = b"".join(chunks)
    body = raw.split(b"\r\n\r\n", 1)[1]
    return _dechunk(body)


def _dechunk(body: bytes) -> bytes:
    out, rest = [], body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)
