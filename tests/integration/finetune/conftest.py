"""Real Celery worker and beat processes against the session's PostgreSQL, Redis and S3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from loraplex.settings import Settings
from tests.integration.conftest import Platform


@dataclass
class Process:
    """A `loraplex <command>` child process."""

    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self) -> Process:
        """Start (or restart) the process in its own process group."""
        handle = tempfile.NamedTemporaryFile(prefix="loraplex-proc-", suffix=".log", delete=False)  # noqa: SIM115
        self.log = Path(handle.name)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loraplex.cli", *self.args],
            env={**os.environ, **self.env},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the whole group, as a crashed machine would."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop gracefully, then forcefully."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def worker_env(gateway_settings: Settings, platform: Platform) -> dict[str, str]:
    """The API's settings, for the worker and beat processes; a gated job's eval calls the
    session's API (it listens on a free port, not the settings' port)."""
    return replace(gateway_settings, eval_api_url=platform.url).to_env()


@pytest.fixture(scope="session")
def beat(worker_env: dict[str, str]) -> Iterator[Process]:
    """Celery beat: reaps jobs whose worker stopped."""
    process = Process(["beat"], worker_env).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def worker(worker_env: dict[str, str], beat: Process) -> Iterator[Process]:
    """One Celery worker consuming `train` and `default`."""
    process = Process(["worker", "-Q", "train,default", "-c", "1"], worker_env).start()
    yield process
    process.stop()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write rows as JSONL."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat_rows(pairs: list[tuple[str, str]]) -> list[dict]:
    """OpenAI chat fine-tuning rows from question/answer pairs."""
    return [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in pairs
    ]
