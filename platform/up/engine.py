"""The embedded platform's engine: `loraplex engine start` logic, owned as a child of `up`."""

from __future__ import annotations

import os
import platform
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from loraplex.serving.engines.launcher import (
    EngineConfig,
    EngineStartError,
    read_pid,
    start_engine,
    stop_engine,
)
from loraplex.up.children import ChildFailed, Say
from loraplex.up.layout import Layout

ENGINE_PORT = 8200  # not SGLang's 30000 nor the test suite's 8100-8110


def engine_config(
    layout: Layout, port: int, host: str = "127.0.0.1", api_key: str = ""
) -> EngineConfig:
    """The CPU engine of the embedded platform: SGLang, rank class 64, its state in the data
    dir, its environment the project's shared `.venv-sglang` (installed once, reused)."""
    return EngineConfig(
        kind="sglang",
        model_dir=layout.model_dir,
        port=port,
        host=host,
        max_lora_rank=64,
        state_dir=layout.engine_dir,
        api_key=api_key,
    )


def engine_api_key(layout: Layout, configured: str) -> str:
    """The key `up`'s engine is started with and the API sends: LORAPLEX_ENGINE_API_KEY when
    set, else one made on the first run and kept, owner-only, in the engine's state dir (an
    engine a previous run left running keeps answering to it)."""
    if configured:
        return configured
    path = layout.engine_api_key
    if path.exists():
        stored = path.read_text().strip()
        if not stored.startswith("-"):
            return stored
        # Made before keys were hex: SGLang's argparse took `--api-key -…` for a missing
        # value, so no engine ever started with it, and nothing answers to it.
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Hex, never starting with "-": one in 64 URL-safe keys did, and SGLang refused to start.
    key = secrets.token_hex(32)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(key)
    return key


def cannot_run_here() -> str | None:
    """Why the CPU engine cannot run on this machine, or None when it can."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        here = f"{platform.system()} on {platform.machine()}"
        return f"the CPU engine needs Linux on x86-64; this is {here}"
    return None


@dataclass
class EngineChild:
    """The engine process, started by the launcher (pid file and health wait)."""

    config: EngineConfig
    say: Say
    name: str = "engine"

    @property
    def log(self) -> Path:
        """The engine's output."""
        return self.config.log_file

    def start(self) -> None:
        """Install (first run), start or reuse the engine, and wait for its health check."""
        began = time.monotonic()
        try:
            info = start_engine(self.config, say=lambda line: self.say(f"  {line}"))
        except EngineStartError as exc:
            raise ChildFailed(self.name, str(exc)) from exc
        total = time.monotonic() - began
        how = "reused" if info.reused else f"server started in {info.startup_s:.0f}s"
        if not info.reused and total > info.startup_s + 5:  # its first run installed it too
            how += f", {total:.0f}s with its install"
        self.say(f"  engine {how}: {info.kind} at {info.url}, serving {info.served_model}")

    def exit_code(self) -> int | None:
        """None while the recorded engine process lives."""
        return None if read_pid(self.config) is not None else -1

    def stop(self) -> None:
        """Stop the engine's whole process group."""
        stop_engine(self.config, grace_s=15)
