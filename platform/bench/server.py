"""Start a real `loraplex api` process for a benchmark, and stop it afterwards."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx

from loraplex.auth.deployment_checks import is_placeholder
from loraplex.bench.scrape import SCRAPE_TOKEN
from loraplex.settings import Settings


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_safe_defaults(env: dict[str, str]) -> dict[str, str]:
    """`env` with what a process of its own needs outside local mode where `env` leaves it
    unset: a random session secret (placeholders refuse to start) and the benches' scrape
    token for `/metrics`."""
    out = dict(env)
    if is_placeholder(out.get("LORAPLEX_SECRET_KEY", "")):
        out["LORAPLEX_SECRET_KEY"] = secrets.token_urlsafe(32)
    if not out.get("LORAPLEX_METRICS_TOKEN"):
        out["LORAPLEX_METRICS_TOKEN"] = SCRAPE_TOKEN
    return out


def without_shedding(settings: Settings) -> Settings:
    """`settings` with admission's load shedding off (TTFT estimate and engine places), for
    benches that measure what the gateway costs, or the baseline of one that measures
    shedding; tenant quotas still apply."""
    return replace(settings, admission_ttft_budget_s=1e9, engine_admission=False)


@contextmanager
def api_process(
    env: dict[str, str], port: int | None = None, workers: int = 1
) -> Iterator[tuple[str, int]]:
    """Run the API in a subprocess with `env` added; yield (base URL, pid)."""
    port = port or free_port()
    env = with_safe_defaults({**os.environ, **env})
    log = tempfile.NamedTemporaryFile(prefix="loraplex-api-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loraplex.cli",
            "api",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,  # a pipe nobody reads would block the server once full
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, Path(log.name))
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_healthy(
    url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"API exited:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("API did not become healthy")
