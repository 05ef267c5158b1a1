"""The engines' command lines use only flags the pinned engines accept, and their agents
describe them truthfully.

SGLang: every flag must be one the project's own GPU recipe passes
(`SglangRecipe(on_cpu=False).server_command`, read at test time) or one of SGLANG_0_5_23
below. That list was verified against SGLang 0.5.23 itself: its options are generated from
the dataclass fields in `sglang/srt/arg_groups/fields/*.py` (field `max_loras_per_batch` is
`--max-loras-per-batch`, unless it names a `cli_name`) plus literal `--...` arguments in
`sglang/srt/server_args.py`; building that parser (`ServerArgs.add_cli_args`) in 0.5.23 gave
560 options, these among them. When the project's SGLang environment (.venv-sglang) exists
and holds 0.5.23, the list is checked again against those source files' text.

vLLM (CPU build 0.32): every flag must be one `VllmCpuRecipe().server_command` passes.

Agents: an agent registers its engine's rank class and slots, which placement plans with, so
they must equal the engine's own flags (docs/engines.md §1, §8).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loraplex.serving.engines.launch_sglang import SGLANG_VERSION, SglangRecipe
from loraplex.serving.engines.launch_vllm import VllmCpuRecipe
from loraplex.serving.engines.launcher import EngineConfig
from tests.unit.deploy import support

SGLANG_0_5_23 = frozenset(
    {
        # what Loraplex's recipe passes (on GPU and on CPU)
        "--model-path",
        "--served-model-name",
        "--host",
        "--port",
        "--enable-lora",
        "--max-lora-rank",
        "--lora-target-modules",
        "--max-loras-per-batch",
        "--max-loaded-loras",
        "--enable-metrics",
        "--sleep-on-idle",
        "--device",
        "--attention-backend",
        "--sampling-backend",
        "--lora-backend",
        "--dtype",
        "--max-total-tokens",
        "--skip-server-warmup",
        "--tool-call-parser",
        "--constrained-json-disable-any-whitespace",
        # tuning knobs docs/deploy.md and docs/engines.md name
        "--tp-size",
        "--dp-size",
        "--mem-fraction-static",
        "--context-length",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--kv-cache-dtype",
        "--api-key",
        "--admin-api-key",
        "--lora-eviction-policy",
        "--lora-drain-wait-threshold",
        "--enable-lora-overlap-loading",
        "--lora-paths",
        "--incremental-streaming-output",
        "--watchdog-timeout",
        "--log-level",
        "--trust-remote-code",
    }
)
VLLM_LORA_RANKS = {1, 8, 16, 32, 64, 128, 256, 320, 512}  # docs/engines.md §8

SGLANG_SITE = Path(support.ROOT, ".venv-sglang", "lib", "python3.11", "site-packages")


def _recipe_flags(command: list[str]) -> set[str]:
    return set(support.flags_of(command))


def sglang_recipe_flags() -> set[str]:
    config = EngineConfig(kind="sglang", model_dir=Path("/models/m"))
    return _recipe_flags(SglangRecipe(on_cpu=False).server_command(config))


def vllm_recipe_flags() -> set[str]:
    config = EngineConfig(kind="vllm", model_dir=Path("/models/m"))
    return _recipe_flags(VllmCpuRecipe().server_command(config))


def engine_invocations(module: str) -> list[support.Invocation]:
    return [
        inv
        for inv in [*support.k8s_commands(), *support.compose_commands()]
        if module in inv.argv and "healthcheck" not in inv.where
    ]


def test_engine_command_lines_are_found() -> None:
    sglang = engine_invocations("sglang.launch_server")
    vllm = engine_invocations("vllm.entrypoints.openai.api_server")
    k8s = {"dev", "prod"} if support.kubectl_available() else set()
    assert {"compose"} | (k8s - {"dev"}) <= {
        inv.where.split(":")[0].split(" ")[0] for inv in sglang
    }
    assert {"compose"} | (k8s - {"prod"}) <= {inv.where.split(":")[0].split(" ")[0] for inv in vllm}


def test_recipe_flags_are_in_the_verified_list() -> None:
    assert sglang_recipe_flags() <= SGLANG_0_5_23
    assert SGLANG_VERSION == "0.5.23", "re-verify SGLANG_0_5_23 for the new SGLang version"


@pytest.mark.parametrize("inv", engine_invocations("sglang.launch_server"), ids=lambda i: i.where)
def test_sglang_flags(inv: support.Invocation) -> None:
    flags = support.flags_of(inv.argv)
    unknown = set(flags) - (sglang_recipe_flags() | SGLANG_0_5_23)
    assert not unknown, f"{inv.where}: not SGLang {SGLANG_VERSION} flags: {sorted(unknown)}"
    assert len(flags) == len(set(flags)), f"{inv.where}: a flag given twice"
    value = lambda flag: support.option_value(inv.argv, flag)  # noqa: E731
    assert value("--lora-target-modules") == "all"  # required without start-up adapters
    assert "--enable-lora" in flags and "--enable-metrics" in flags
    assert int(value("--max-loaded-loras")) >= int(value("--max-loras-per-batch"))
    assert Path(value("--model-path")).name == value("--served-model-name")
    assert ":" not in value("--served-model-name")  # docs/engines.md §3.2, §9


@pytest.mark.parametrize(
    "inv", engine_invocations("vllm.entrypoints.openai.api_server"), ids=lambda i: i.where
)
def test_vllm_flags(inv: support.Invocation) -> None:
    flags = support.flags_of(inv.argv)
    unknown = set(flags) - vllm_recipe_flags()
    assert not unknown, f"{inv.where}: flags the vLLM recipe does not use: {sorted(unknown)}"
    value = lambda flag: support.option_value(inv.argv, flag)  # noqa: E731
    assert int(value("--max-lora-rank")) in VLLM_LORA_RANKS
    assert int(value("--max-cpu-loras")) >= int(value("--max-loras"))
    assert Path(value("--model")).name == value("--served-model-name")


def test_vllm_environment_enables_runtime_lora() -> None:
    needed = VllmCpuRecipe().server_env(EngineConfig(kind="vllm"), {})
    assert needed["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    for render_name in support.OVERLAYS if support.kubectl_available() else []:
        for workload in support.workloads(support.render_overlay(render_name)):
            for container in support.containers(workload):
                if "vllm.entrypoints.openai.api_server" in support.k8s_argv(container):
                    env = {e["name"]: e.get("value") for e in container.get("env", [])}
                    assert env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == "True"
                    assert "VLLM_CPU_KVCACHE_SPACE" in env
    for name, service in support.compose_model()["services"].items():
        if "vllm.entrypoints.openai.api_server" in support.compose_argv(service):
            assert service["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True", name


def _pairs() -> list[tuple[str, list[str], list[str]]]:
    """(where, agent argv, engine argv) for every engine pod and Compose agent."""
    pairs = []
    renders = support.all_renders() if support.kubectl_available() else {}
    for render_name, objects in renders.items():
        for workload in support.workloads(objects):
            spec = support.pod_spec(workload)
            agents = [c for c in spec.get("initContainers", []) if c["name"] == "agent"]
            if agents:
                (engine,) = spec["containers"]
                where = f"{render_name}: {workload['metadata']['name']}"
                pairs.append((where, support.k8s_argv(agents[0]), support.k8s_argv(engine)))
    services = support.compose_model()["services"]
    for name, service in services.items():
        if name.startswith("agent-"):
            engine = services[support.compose_engine_of(name)]
            pairs.append(
                (f"compose {name}", support.compose_argv(service), support.compose_argv(engine))
            )
    return pairs


@pytest.mark.parametrize(("where", "agent", "engine"), _pairs(), ids=[p[0] for p in _pairs()])
def test_agent_describes_its_engine(where: str, agent: list[str], engine: list[str]) -> None:
    a = lambda flag: support.option_value(agent, flag)  # noqa: E731
    e = lambda flag: support.option_value(engine, flag)  # noqa: E731
    if "sglang.launch_server" in engine:
        assert a("--engine-kind") == "sglang", where
        gpu, host = e("--max-loras-per-batch"), e("--max-loaded-loras")
    else:
        assert "vllm.entrypoints.openai.api_server" in engine and a("--engine-kind") == "vllm"
        gpu, host = e("--max-loras"), e("--max-cpu-loras")
    assert a("--max-lora-rank") == e("--max-lora-rank"), where
    assert a("--gpu-slots") == gpu, where
    assert a("--host-slots") == host, where
    assert a("--base-model") == e("--served-model-name"), where


def _sglang_source_flags(site: Path) -> set[str]:
    srt = site / "sglang" / "srt"
    files = [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py"))]
    flags: set[str] = set()
    for path in files:
        text = path.read_text()
        flags.update(re.findall(r"[\"'](--[a-z0-9][a-z0-9-]*)[\"']", text))
        flags.update(
            "--" + name.replace("_", "-")
            for name in re.findall(r"^\s+([a-z][a-z0-9_]*)\s*:\s*A\[", text, re.MULTILINE)
        )
    return flags


def _installed_sglang_version(site: Path) -> str | None:
    for info in site.glob("sglang-*.dist-info"):
        return info.name.removeprefix("sglang-").removesuffix(".dist-info")
    return None


def test_verified_flags_against_sglang_source_when_installed() -> None:
    version = _installed_sglang_version(SGLANG_SITE) if SGLANG_SITE.is_dir() else None
    if version != SGLANG_VERSION:
        pytest.skip(
            f"no SGLang {SGLANG_VERSION} in .venv-sglang (found {version}); "
            "the flags were checked against the documented list only"
        )
    found = _sglang_source_flags(SGLANG_SITE)
    assert found >= SGLANG_0_5_23, f"not in SGLang {version}: {sorted(SGLANG_0_5_23 - found)}"
