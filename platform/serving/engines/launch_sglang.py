"""How to install and run SGLang, the production engine, with runtime LoRA loading.

On a machine with an NVIDIA GPU this is stock `sglang` with its CUDA dependencies. On a
CPU-only machine (development, CI) the same server runs with three additions
(docs/sglang-on-cpu.md): the local CPU torch instead of the CUDA torch SGLang pins;
SGLang's runtime dependencies without the CUDA, kernel and multimodal-only ones; and
Loraplex's pure-PyTorch `sgl_kernel` stand-in plus two import-time fixes
(`loraplex.serving.engines.sglang_cpu`), imported by every SGLang process from a `.pth`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from loraplex.serving.engines import sglang_cpu
from loraplex.serving.engines.engine_env import probe
from loraplex.serving.engines.recipes import recipe_for, sglang_args

if TYPE_CHECKING:
    from loraplex.serving.engines.launcher import EngineConfig

SGLANG_VERSION = "0.5.23"  # the version the driver's contract tests read
SERVER_MODULE = "sglang.launch_server"
CPU_TORCH = "torch==2.13.0"  # the local CPU wheel; SGLang pins a CUDA torch==2.14.1
CPU_TORCHVISION = "torchvision==0.28.0"  # imported by multimodal config code, even for text
# SGLang 0.5.23's declared runtime dependencies (its wheel's METADATA) minus the CUDA,
# kernel and multimodal-only ones, plus `dill` (imported, not declared). Installed against
# the CPU torch; `sglang` and `torchvision` go in afterwards without their dependencies.
CPU_RUNTIME = (
    "aiohttp", "anthropic>=0.20.0", "blobfile==3.0.0", "build", "compressed-tensors==0.18.0",
    "dill", "distro", "easydict", "einops", "fastapi", "gguf", "interegular", "IPython",
    "llguidance>=1.7.6,<2", "mistral_common>=1.11.5", "msgspec", "ninja", "numpy",
    "openai==2.8.0", "openai-harmony==0.0.4", "orjson", "packaging", "partial_json_parser",
    "pillow", "prometheus-client>=0.20.0", "psutil", "pybase64", "pydantic",
    "python-dateutil<3", "python-multipart", "pyzmq>=25.1.2", "regex", "requests", "scipy",
    "sentencepiece==0.2.1", "setproctitle", "smg-grpc-servicer>=0.9.0", "soundfile==0.13.1",
    "tiktoken", "tqdm", "transformers==5.19.0", "tokenizers==0.23.2", "uvicorn>=0.51",
    "uvloop", "watchfiles", "xgrammar==0.2.7", "xxhash", "zstandard",
)  # fmt: skip


def has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible (then stock SGLang runs, without the stand-in)."""
    return Path("/dev/nvidia0").exists()


class SglangRecipe:
    """SGLang on GPU as shipped, or on CPU with the stand-in kernels."""

    kind = "sglang"
    server_module = SERVER_MODULE
    venv_name = ".venv-sglang"
    install_size = "about 2.9 GB"

    def __init__(self, on_cpu: bool | None = None) -> None:
        self.on_cpu = (not has_gpu()) if on_cpu is None else on_cpu

    def install_steps(self, config: EngineConfig) -> list[list[str]]:
        """The commands that build the engine environment, in order."""
        pip = [str(config.python), "-m", "pip", "install", "--quiet"]
        venv = [sys.executable, "-m", "venv", str(config.venv_dir)]
        if not self.on_cpu:
            return [venv, [*pip, f"sglang=={SGLANG_VERSION}"]]
        constraints = config.venv_dir / "loraplex-constraints.txt"
        return [
            venv,
            [*pip, CPU_TORCH],
            # The constraint keeps every later resolution on the CPU torch: without it a
            # dependency asking for a newer torch would pull a multi-GB CUDA build.
            [*pip, "--constraint", str(constraints), *CPU_RUNTIME],
            [*pip, "--no-deps", CPU_TORCHVISION],
            [*pip, "--no-deps", f"sglang=={SGLANG_VERSION}"],
        ]

    def before_install(self, config: EngineConfig) -> None:
        """Write the torch constraint file the CPU install steps use."""
        (config.venv_dir / "loraplex-constraints.txt").write_text(CPU_TORCH + "\n")

    def venv_is_ready(self, config: EngineConfig) -> bool:
        """Whether the environment has the pinned SGLang (and, on CPU, torchvision)."""
        packages = ["sglang"] + (["torchvision"] if self.on_cpu else [])
        code = (
            "import importlib.metadata as m, sys\n"
            f"ok = m.version('sglang') == {SGLANG_VERSION!r}\n"
            f"for name in {packages!r}: m.version(name)\n"
            "sys.exit(0 if ok else 1)\n"
        )
        return probe(config, code)

    def prepare(self, config: EngineConfig) -> None:
        """On CPU: refuse an SGLang that needs ops the stand-in lacks, then (re)install it.

        Copied on every start, so a changed stand-in reaches an existing environment.
        """
        if not self.on_cpu:
            return
        site_packages = site_packages_of(config)
        missing = sglang_cpu.missing_cpu_ops(site_packages / "sglang")
        if missing:
            listed = ", ".join(f"{name} ({where})" for name, where in sorted(missing.items()))
            raise RuntimeError(
                f"sglang {SGLANG_VERSION} imports CPU kernels the sgl_kernel stand-in lacks: "
                f"{listed}; add them to loraplex/serving/engines/sglang_cpu/sgl_kernel"
            )
        sglang_cpu.install_into(site_packages)

    def server_command(self, config: EngineConfig) -> list[str]:
        """The SGLang server's command line for `config`: its model's recipe, then CPU flags."""
        command = [
            str(config.python), "-m", SERVER_MODULE,
            *sglang_args(
                recipe_for(config.model_dir.name),
                model_path=str(config.model_dir.resolve()),
                rank=str(config.max_lora_rank),
                gpu_slots=str(config.max_loras),
                host_slots=str(max(config.max_cpu_loras, config.max_loras)),
                host=config.host,
                port=str(config.port),
                api_key=config.api_key,
            ),
        ]  # fmt: skip
        if self.on_cpu:
            command += [
                "--device", "cpu",
                "--attention-backend", "torch_native",
                "--sampling-backend", "pytorch",
                "--lora-backend", "torch_native",
                # `auto` serves an fp32 checkpoint in fp16 on CPU, and greedy output drifts
                "--dtype", "float32",
                "--max-total-tokens", str(config.kv_cache_tokens),
                "--skip-server-warmup",
            ]  # fmt: skip
        return command

    def server_env(self, config: EngineConfig, base: Mapping[str, str]) -> dict[str, str]:
        """The engine's environment: `base`, plus SGLang's CPU switch when on CPU."""
        env = dict(base)
        env["PYTHONUNBUFFERED"] = "1"
        if self.on_cpu:
            env["SGLANG_USE_CPU_ENGINE"] = "1"  # also arms the .pth fixes in every subprocess
        env.pop("PYTHONPATH", None)  # the platform's paths must not leak into the engine's venv
        return env


def site_packages_of(config: EngineConfig) -> Path:
    """The engine environment's site-packages folder."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return config.venv_dir / "lib" / version / "site-packages"
