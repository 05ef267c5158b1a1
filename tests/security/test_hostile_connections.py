"""Tenant A holds connections open (slow uploads, unread streams, resume readers) or guesses
passwords by the hundred while tenant B streams."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx

from tests.security.conftest import WINDOW_S, Outcome, Target, check

SLOW_UPLOADS = 40
UNREAD_STREAMS = 100
RESUME_READERS = 100
LOGIN_GUESSES = 200


def _connect(target: Target) -> socket.socket:
    parts = urlsplit(target.url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def _request(
    target: Target, method: str, path: str, body: bytes = b"", length: int = -1, **headers: str
) -> bytes:
    """A raw HTTP/1.1 request of tenant A's (`length` overrides the body's own)."""
    parts = urlsplit(target.url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}"]
    lines += [f"Authorization: Bearer {target.a.key}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    if method == "POST":
        lines.append(f"Content-Length: {length if length >= 0 else len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _status(sock: socket.socket) -> int:
    """The status of the response on `sock`, reading no more than its first line."""
    first = b""
    while b"\r\n" not in first:
        chunk = sock.recv(1)
        if not chunk:
            return 0
        first += chunk
    return int(first.split()[1])


def _rest(sock: socket.socket) -> str:
    """The headers and body of a whole (not streamed) response on `sock`, after its status
    line: what a refusal says."""
    head = b""
    while not head.endswith(b"\r\n\r\n") and head != b"\r\n":
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = b""
    with contextlib.suppress(OSError):
        while len(body) < length and (chunk := sock.recv(length - len(body))):
            body += chunk
    return body.decode("utf-8", "replace")


def _status_if_sent(sock: socket.socket) -> int:
    """The status of a response already sent on `sock` (0 if none has come within 0.5 s)."""
    sock.settimeout(0.5)
    try:
        return _status(sock)
    except TimeoutError:
        return 0
    finally:
        sock.settimeout(30)


@contextlib.contextmanager
def _sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for sock in held:
            sock.close()


def _chat(target: Target, content: str, **extra: object) -> bytes:
    body = {"model": target.model, "stream": True, **extra}
    body["messages"] = [{"role": "user", "content": content}]
    return json.dumps(body).encode()


def test_slow_uploads_by_the_dozen_leave_b_alone(target: Target) -> None:
    path = f"/api/v1/tenants/{target.a.id}/adapters/target/versions"
    part = (
        b'--x\r\nContent-Disposition: form-data; name="file"; '
        b'filename="adapter_model.safetensors"\r\n\r\n'
    )

    def attack() -> Outcome:
        outcome = Outcome()
        with _sockets() as held:
            for _ in range(SLOW_UPLOADS):  # a connection every 25 ms: held, not a burst
                time.sleep(0.025)
                sock = _connect(target)
                head = _request(
                    target, "POST", path, length=10_000_000,
                    content_type="multipart/form-data; boundary=x",
                )  # fmt: skip
                sock.sendall(head + part)
                held.append(sock)
            # Past the plan's places, uploads are refused before their body is read; what
            # the refusals say is read whole.
            for sock in held:
                if status := _status_if_sent(sock):
                    outcome.statuses.append(status)
                    outcome.messages.append(_rest(sock))
            deadline = time.monotonic() + WINDOW_S
            while time.monotonic() < deadline:
                for sock in held:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"\0" * 16)
                time.sleep(0.2)
        return outcome

    measured = target.measure(f"{SLOW_UPLOADS} uploads at 80 B/s", "slow uploads", attack)
    check(measured, names=("uploads of yours",))
    assert measured.outcome.statuses.count(429) >= SLOW_UPLOADS - 2, measured.outcome.statuses


def test_unread_streams_by_the_hundred_are_refused_past_the_plan(target: Target) -> None:
    def attack() -> Outcome:
        outcome = Outcome()
        with _sockets() as held:
            # At once: opened over seconds, the API's slow-client cut would free the first
            # two places (correctly) and let later streams in.
            for _ in range(UNREAD_STREAMS):
                sock = _connect(target)
                body = _chat(target, "tokens=5000 every=0.001")
                sock.sendall(
                    _request(target, "POST", "/v1/chat/completions", body, content_type="application/json")
                )  # fmt: skip
                held.append(sock)
            # The refusals are read whole; the streams let in are never read again.
            for sock in held:
                outcome.statuses.append(status := _status(sock))
                if status != 200:
                    outcome.messages.append(_rest(sock))
            time.sleep(WINDOW_S)
        return outcome

    measured = target.measure(f"{UNREAD_STREAMS} streams never read", "slow SSE readers", attack)
    check(measured, names=("streams in flight", "requests in flight", "concurrent_streams"))
    assert measured.outcome.statuses.count(200) <= 2, "A's plan allows 2 streams at once"


def test_resume_readers_by_the_hundred_are_refused_past_the_plan(target: Target) -> None:
    def attack() -> Outcome:
        outcome = Outcome()
        body = {
            "model": target.model, "stream": True, "stream_options": {"resumable": True},
            "messages": [{"role": "user", "content": "tokens=400 every=0.01"}],
        }  # fmt: skip
        with (
            httpx.Client(base_url=target.url, headers=target.a.headers, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as stream,
        ):
            first = next(line for line in stream.iter_lines() if line.startswith("data:"))
            completion = json.loads(first[5:])["id"]
            path = f"/v1/chat/completions/{completion}/events"
            with _sockets() as held:
                for _ in range(RESUME_READERS):
                    sock = _connect(target)
                    sock.sendall(_request(target, "GET", path, last_event_id="0"))
                    held.append(sock)
                outcome.statuses = [_status(sock) for sock in held]
                refused = http.get(path, headers={"Last-Event-ID": "0"}, timeout=10)
                outcome.add(refused)
                time.sleep(WINDOW_S / 2)
        return outcome

    measured = target.measure(f"{RESUME_READERS} resume readers", "resume readers", attack)
    check(measured, names=("stream",))


def test_password_guessing_is_slowed_and_b_never_notices(target: Target) -> None:
    def attack() -> Outcome:
        outcome = Outcome()
        with httpx.Client(base_url=target.url, timeout=30) as http:
            http.get("/login")
            token = http.cookies.get("csrftoken", "")
            for i in range(LOGIN_GUESSES):
                form = {"email": "owner@example.com", "password": f"guess-{i}"}
                response = http.post("/login", data=form, headers={"x-csrftoken": token})
                outcome.statuses.append(response.status_code)
                if response.status_code == 429:
                    outcome.messages = [response.text[-2000:]]
        return outcome

    measured = target.measure(f"{LOGIN_GUESSES} wrong passwords", "logins", attack)
    check(measured, names=("too many",))
