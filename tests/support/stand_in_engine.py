"""The drills' stand-in engine (tests/system/fake_engine.py) on a loopback port, by PID; with
`api_key`, one that asks for it on its `/v1` routes as vLLM's `--api-key` does
(tests/support/keyed_engine.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from loraplex.bench.server import free_port

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "system" / "fake_engine.py"
KEYED_ENGINE = Path(__file__).resolve().parent / "keyed_engine.py"


@contextlib.contextmanager
def stand_in_engine(model: str, name: str = "stand-in", api_key: str = "") -> Iterator[str]:
    """The stand-in engine serving `model` on a free loopback port; its URL. Killed after.
    With `api_key`, its `/v1` routes answer 401 to a request without that key."""
    port = free_port()
    script, env = FAKE_ENGINE, None
    if api_key:  # in the environment, as VLLM_API_KEY: not on a command line `ps` shows
        script, env = KEYED_ENGINE, {**os.environ, "VLLM_API_KEY": api_key}
    command = [sys.executable, str(script), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*command, "--name", name, "--model", model], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()
