"""Every engine in Compose and both overlays runs with exactly the flags `loraplex engine
start` passes for its model, rank and slots: one recipe per base model
(loraplex.serving.engines.recipes), written into the deployment files by
deploy/engine_args.py. A flag added to the recipe and not to the manifests fails here, not
on a GPU cluster.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from loraplex.serving.engines.launch_sglang import SglangRecipe
from loraplex.serving.engines.launch_vllm import VllmCpuRecipe
from loraplex.serving.engines.launcher import EngineConfig
from loraplex.serving.engines.recipes import MODEL_RECIPES, UnknownModel, require_recipe
from tests.unit.deploy import support

K8S_API_KEY = "$(LORAPLEX_ENGINE_API_KEY)"  # expanded by the kubelet from the engine's env


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("engine_args", support.DEPLOY / "engine_args.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launcher_argv(engine: list[str], agent: list[str], api_key: str) -> list[str]:
    """What the launcher passes for the model the engine serves and the rank and slots its
    agent registers (which test_engine_flags checks against the engine's own)."""
    is_sglang = "sglang.launch_server" in engine
    served = support.option_value(engine, "--served-model-name")
    assert served is not None
    recipe = require_recipe(served)  # a deployed model without a recipe fails here
    value = lambda flag: int(support.option_value(agent, flag) or 0)  # noqa: E731
    assert value("--max-lora-rank") <= recipe.max_lora_rank, f"{served}: rank over its limit"
    config = EngineConfig(
        kind="sglang" if is_sglang else "vllm",
        model_dir=Path("/models", served),
        host="0.0.0.0",
        port=support.ENGINE_PORT,
        max_lora_rank=value("--max-lora-rank"),
        max_loras=value("--gpu-slots"),
        max_cpu_loras=value("--host-slots"),
        api_key=api_key if is_sglang else "",  # vLLM takes it from VLLM_API_KEY
    )
    launcher = SglangRecipe(on_cpu=False) if is_sglang else VllmCpuRecipe()
    return ["python3", *launcher.server_command(config)[1:]]


def k8s_engines() -> list[tuple[str, dict[str, Any], list[str]]]:
    """(where, engine container, agent argv) of every engine pod of every render."""
    found = []
    for render_name, objects in support.all_renders().items():
        for workload in support.workloads(objects):
            spec = support.pod_spec(workload)
            agents = [c for c in spec.get("initContainers", []) if c["name"] == "agent"]
            if agents:
                (engine,) = spec["containers"]
                where = f"{render_name}: {workload['metadata']['name']}"
                found.append((where, engine, support.k8s_argv(agents[0])))
    return found


def compose_engines() -> list[tuple[str, dict[str, Any], list[str]]]:
    services = support.compose_model()["services"]
    return [
        (f"compose {name}", services[support.compose_engine_of(name)], support.compose_argv(s))
        for name, s in services.items()
        if name.startswith("agent-")
    ]


def env_source(container: dict[str, Any], name: str) -> dict[str, Any]:
    (entry,) = [e for e in container.get("env", []) if e["name"] == name]
    return dict(entry.get("valueFrom", {}).get("secretKeyRef", {}))


KEY_REF = {"name": "loraplex-secrets", "key": "LORAPLEX_ENGINE_API_KEY"}


@pytest.mark.skipif(not support.kubectl_available(), reason=support.KUBECTL_MISSING)
def test_kubernetes_engines_run_the_launchers_command_line() -> None:
    engines = k8s_engines()
    assert {where.split(":")[0] for where, _, _ in engines} >= set(support.OVERLAYS)
    for where, engine, agent in engines:
        argv = support.k8s_argv(engine)
        assert argv == launcher_argv(argv, agent, K8S_API_KEY), where
        if "sglang.launch_server" in argv:
            assert env_source(engine, "LORAPLEX_ENGINE_API_KEY") == KEY_REF, where
        else:
            assert env_source(engine, "VLLM_API_KEY") == KEY_REF, where


def test_compose_engines_run_the_launchers_command_line() -> None:
    api_key = support.read_env_file(support.ENV_EXAMPLE)["LORAPLEX_ENGINE_API_KEY"]
    engines = compose_engines()
    assert {where for where, _, _ in engines} == {
        "compose agent-r16", "compose agent-r64", "compose agent-cpu"
    }  # fmt: skip
    for where, engine, agent in engines:
        argv = support.compose_argv(engine)
        assert argv == launcher_argv(argv, agent, api_key), where
        if "vllm.entrypoints.openai.api_server" in argv:
            assert engine["environment"]["VLLM_API_KEY"] == api_key, where


@pytest.mark.skipif(not support.kubectl_available(), reason=support.KUBECTL_MISSING)
def test_production_engines_parse_llama_tool_calls_and_write_compact_json() -> None:
    for where, engine, _ in k8s_engines():
        if where.startswith("prod"):
            argv = support.k8s_argv(engine)
            assert support.option_value(argv, "--tool-call-parser") == "llama3", where
            assert "--constrained-json-disable-any-whitespace" in argv, where


def test_the_generated_files_are_current() -> None:
    generator = _generator()
    for path in generator.FILES:
        text = path.read_text()
        api_key = generator.COMPOSE_API_KEY if path.name == "compose.yaml" else K8S_API_KEY
        assert generator.regenerate(text, api_key) == text, (
            f"{path.relative_to(support.ROOT)} is stale: run .venv/bin/python deploy/engine_args.py"
        )
        assert "# engine-args:" in text


def test_a_model_without_a_recipe_is_refused() -> None:
    with pytest.raises(UnknownModel):
        require_recipe("Some-Unlisted-Model")
    assert {"Llama-3.1-8B-Instruct", "loraplex-tiny"} <= set(MODEL_RECIPES)


def test_the_dev_engine_start_uses_the_dev_models_recipe() -> None:
    config = EngineConfig(kind="sglang", model_dir=Path("/models/loraplex-tiny"))
    argv = SglangRecipe(on_cpu=True).server_command(config)
    assert support.option_value(argv, "--tool-call-parser") == "qwen"
    assert "--constrained-json-disable-any-whitespace" in argv
    llama = EngineConfig(kind="sglang", model_dir=Path("/models/Llama-3.1-8B-Instruct"))
    assert (
        support.option_value(SglangRecipe(on_cpu=False).server_command(llama), "--tool-call-parser")
        == "llama3"
    )
