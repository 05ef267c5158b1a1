"""A real S3 HTTP endpoint on loopback: moto's server mode in a subprocess.

It can be stopped and started again on the same port, so a test can cut the store off in
the middle of an upload and bring it back. Moto keeps objects in memory: a restarted server
is empty.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """Runs `python -m moto.server` on 127.0.0.1:`port` (a free port by default)."""

    def __init__(self, port: int | None = None, startup_timeout_s: float = 60.0) -> None:
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_running(self) -> bool:
        """Whether the subprocess is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it answers HTTP."""
        if self.is_running:
            return
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-p", str(self.port), "-H", "127.0.0.1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_until_answering()

    def stop(self) -> None:
        """Stop the server (it answers nothing until started again)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_until_answering(self) -> None:
        """Poll the port until moto replies, or fail with the reason."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.is_running:
                raise RuntimeError(f"moto server on port {self.port} exited during startup")
            try:
                httpx.get(self.endpoint_url + "/moto-api/", timeout=1.0)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server on port {self.port} did not answer in time")
