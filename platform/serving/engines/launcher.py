"""Install and run a development engine: SGLang (the default) or vLLM, LoRA enabled.

Each engine kind gets its own virtual environment (`.venv-sglang`, `.venv-engine` for
vLLM), because the engines pin torch, transformers and a web stack the platform's own
environment must not be bound to. What to install and how to start the server is the
kind's recipe (`launch_sglang.py`, `launch_vllm.py`); this module owns the process: one
launcher per state dir, a pid file, a JSON record, health waits and a clean stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from loraplex.serving.engines.launch_sglang import SglangRecipe
from loraplex.serving.engines.launch_vllm import VllmCpuRecipe
from loraplex.serving.engines.priority import lower_busy_waiters

Say = Callable[[str], None]
DEFAULT_KIND = "sglang"  # the production engine; `--kind vllm` for the other driver


class EngineStartError(RuntimeError):
    """The engine could not be installed or did not come up healthy."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run a development engine. Paths are relative to the working directory."""

    kind: str = DEFAULT_KIND  # "sglang" | "vllm"
    model_dir: Path = Path("var/models/loraplex-tiny")  # the folder name is the model id
    port: int = 8100
    host: str = "127.0.0.1"
    max_lora_rank: int = 64
    # Adapters in one batch: vLLM --max-loras, SGLang --max-loras-per-batch (the GPU slots;
    # on SGLang a batch with base-model requests spends one of them on the base).
    max_loras: int = 4
    # Adapters held in host memory: vLLM --max-cpu-loras, SGLang --max-loaded-loras.
    max_cpu_loras: int = 8
    kv_cache_gib: int = 1  # vLLM's KV cache on CPU
    kv_cache_tokens: int = 8192  # SGLang's --max-total-tokens on CPU
    venv: Path | None = None  # default: the kind's own, `.venv-sglang` or `.venv-engine`
    state_dir: Path = Path("var/engine")
    startup_timeout_s: float = 600.0
    # CPU priority (0 normal, 19 lowest) of vLLM's EngineCore, which busy-waits while its
    # worker computes: see loraplex.serving.engines.priority.
    scheduler_nice: int = 19
    # The engine's `--api-key`: every route but health and metrics then wants it as a bearer
    # token (docs/engines.md §2.5); empty: the engine takes anyone's requests.
    api_key: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        """Where the engine answers."""
        return f"http://{self.host}:{self.port}"

    @property
    def venv_dir(self) -> Path:
        """The engine environment's folder."""
        return self.venv or Path(recipe_for(self).venv_name)

    @property
    def python(self) -> Path:
        """The engine environment's interpreter."""
        return self.venv_dir / "bin" / "python"

    @property
    def pid_file(self) -> Path:
        """Holds the engine's process id (also its process group id)."""
        return self.state_dir / "engine.pid"

    @property
    def log_file(self) -> Path:
        """The engine's stdout and stderr."""
        return self.state_dir / "engine.log"

    @property
    def info_file(self) -> Path:
        """A JSON record of the running engine, for `status` and for test fixtures."""
        return self.state_dir / "engine.json"


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """A running engine: where it is, what it serves, and whether this call started it."""

    url: str
    pid: int | None
    model_dir: str
    served_model: str
    log_file: str
    reused: bool = False
    startup_s: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)
    kind: str = DEFAULT_KIND


class Recipe(Protocol):
    """What one engine kind needs: its environment and its server's command line."""

    kind: str
    server_module: str
    venv_name: str
    install_size: str

    def install_steps(self, config: EngineConfig) -> list[list[str]]:
        """The commands that build the environment, in order."""
        ...

    def venv_is_ready(self, config: EngineConfig) -> bool:
        """Whether the environment is complete."""
        ...

    def before_install(self, config: EngineConfig) -> None:
        """Files the install steps read, written once the environment's folder exists."""
        ...

    def prepare(self, config: EngineConfig) -> None:
        """Last steps before every start (e.g. copy stand-ins into the environment)."""
        ...

    def server_command(self, config: EngineConfig) -> list[str]:
        """The server's command line."""
        ...

    def server_env(self, config: EngineConfig, base: Mapping[str, str]) -> dict[str, str]:
        """The server's environment."""
        ...


RECIPES: dict[str, Recipe] = {"sglang": SglangRecipe(), "vllm": VllmCpuRecipe()}


def recipe_for(config: EngineConfig) -> Recipe:
    """The recipe of `config.kind`."""
    try:
        return RECIPES[config.kind]
    except KeyError:
        raise EngineStartError(
            f"unknown engine kind {config.kind!r}; known: {sorted(RECIPES)}"
        ) from None


def install_steps(config: EngineConfig) -> list[list[str]]:
    """The commands that build `config`'s engine environment, in order."""
    return recipe_for(config).install_steps(config)


def server_command(config: EngineConfig) -> list[str]:
    """The command line of `config`'s engine server."""
    return recipe_for(config).server_command(config)


def server_env(config: EngineConfig, base: Mapping[str, str]) -> dict[str, str]:
    """The engine server's environment: `base` plus what the kind needs."""
    return recipe_for(config).server_env(config, base)


def ensure_venv(config: EngineConfig, say: Say) -> None:
    """Build the engine environment unless it is complete, then prepare it for a start."""
    recipe = recipe_for(config)
    if not recipe.venv_is_ready(config):
        say(f"installing the {config.kind} engine into {config.venv_dir} "
            f"({recipe.install_size}, a few minutes)")  # fmt: skip
        make_venv, *steps = recipe.install_steps(config)
        if not config.python.exists():
            _run_step(make_venv)
        recipe.before_install(config)
        for step in steps:
            _run_step(step)
    try:
        recipe.prepare(config)
    except RuntimeError as exc:
        raise EngineStartError(str(exc)) from exc


def _run_step(step: list[str]) -> None:
    """Run one install step; an uninstall may find nothing, every other step must succeed."""
    result = subprocess.run(step, check=False)
    if result.returncode != 0 and "uninstall" not in step:
        raise EngineStartError(f"engine install step failed: {' '.join(step)}")


def ensure_model(model_dir: Path, say: Say) -> None:
    """Generate the development base model into `model_dir` unless it is there."""
    if (model_dir / "config.json").exists():
        return
    say(f"making the development model in {model_dir}")
    from loraplex.dev.make_model import make_model  # needs torch: import only when used

    make_model(model_dir, seed=0)


def is_healthy(url: str, limit_s: float = 2.0) -> bool:
    """Whether an engine answers `GET /health` with 200 at `url`."""
    try:
        return httpx.get(f"{url}/health", timeout=limit_s).status_code == 200
    except httpx.HTTPError:
        return False


def read_pid(config: EngineConfig) -> int | None:
    """The recorded engine pid if that process is still alive and is a vLLM server."""
    try:
        pid = int(config.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    # A recycled pid belongs to someone else: only claim a process running our server.
    servers = (recipe.server_module.encode() for recipe in RECIPES.values())
    return pid if any(server in cmdline for server in servers) else None


def read_info(config: EngineConfig) -> EngineInfo | None:
    """The record the last `start_engine` wrote, if any."""
    try:
        return EngineInfo(**json.loads(config.info_file.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def _launch_lock(config: EngineConfig) -> Iterator[None]:
    """One launcher at a time per state dir, so parallel test sessions share one engine."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with open(config.state_dir / "launch.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start_engine(config: EngineConfig, say: Say = print) -> EngineInfo:
    """Start the engine in the background, or reuse the healthy one already running."""
    with _launch_lock(config):
        pid = read_pid(config)
        if pid is not None:
            running = read_info(config) or _info_for(config, pid)
            if running.kind != config.kind:
                raise EngineStartError(
                    f"a {running.kind} engine already runs from {config.state_dir}; stop it "
                    f"first (loraplex engine stop) or give this one its own --state-dir"
                )
            if running.extra.get(KEY_FINGERPRINT, "") != key_fingerprint(config.api_key):
                raise EngineStartError(
                    f"the engine running from {config.state_dir} was started with another API "
                    f"key (or none); stop it first (loraplex engine stop)"
                )
            _wait_healthy(config, pid)  # it may still be starting
            lower_busy_waiters(pid, config.scheduler_nice)
            return _replace_reused(running)
        if pid is None and is_healthy(config.url):
            raise EngineStartError(
                f"{config.url} is taken by an engine this launcher did not start"
            )
        ensure_venv(config, say)
        ensure_model(config.model_dir, say)
        return _spawn(config, say)


def _replace_reused(info: EngineInfo) -> EngineInfo:
    """`info` marked as reused rather than started now."""
    values = asdict(info)
    values.update(reused=True, startup_s=0.0)
    return EngineInfo(**values)


def _spawn(config: EngineConfig, say: Say) -> EngineInfo:
    """Run the server detached, record it, and wait until it answers."""
    started = time.monotonic()
    with open(config.log_file, "ab") as log:
        process = subprocess.Popen(
            server_command(config),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(config, os.environ),
            start_new_session=True,  # its own process group, so `stop` ends its workers too
        )
    config.pid_file.write_text(str(process.pid))
    say(f"{config.kind} engine starting (pid {process.pid}), log in {config.log_file}")
    _wait_healthy(config, process.pid, process)
    lower_busy_waiters(process.pid, config.scheduler_nice)
    info = _info_for(config, process.pid, startup_s=round(time.monotonic() - started, 1))
    config.info_file.write_text(json.dumps(asdict(info)))
    return info


KEY_FINGERPRINT = "api_key_sha256"  # in the record: which key, never the key itself


def key_fingerprint(api_key: str) -> str:
    """A short digest telling engine records started with different keys apart ("": none)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else ""


def _info_for(config: EngineConfig, pid: int, startup_s: float = 0.0) -> EngineInfo:
    """The record of the engine `config` describes, running as `pid`."""
    fingerprint = key_fingerprint(config.api_key)
    return EngineInfo(
        url=config.url,
        pid=pid,
        model_dir=str(config.model_dir.resolve()),
        served_model=config.model_dir.name,
        log_file=str(config.log_file),
        startup_s=startup_s,
        kind=config.kind,
        extra={KEY_FINGERPRINT: fingerprint} if fingerprint else {},
    )


def _wait_healthy(
    config: EngineConfig, pid: int, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until `/health` answers, failing fast (with the log's tail) if the server dies."""
    deadline = time.monotonic() + config.startup_timeout_s
    while time.monotonic() < deadline:
        if is_healthy(config.url):
            return
        exited = process.poll() is not None if process else not process_alive(pid)
        if exited:
            raise EngineStartError(f"engine exited during startup:\n{_log_tail(config)}")
        time.sleep(0.5)
    raise EngineStartError(f"engine not healthy after {config.startup_timeout_s:.0f}s")


def stop_engine(config: EngineConfig, grace_s: float = 30.0) -> bool:
    """Stop the engine this launcher started; False when none was running."""
    pid = read_pid(config)
    if pid is None:
        config.pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    config.pid_file.unlink(missing_ok=True)
    config.info_file.unlink(missing_ok=True)
    return True


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[-1].split()[0] != "Z"


def _log_tail(config: EngineConfig, lines: int = 30) -> str:
    """The last lines of the engine log."""
    try:
        return "\n".join(config.log_file.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
