"""One recipe per base model: the engine flags that depend on the model, not on the engine.

Which parser reads the model's tool calls, whether it writes a reasoning section, which chat
template it uses, how structured output is constrained and which modules adapters may
target. `SglangRecipe.server_command` (`loraplex engine start`), the Compose engines and the
Kubernetes rank classes all take their flags from here: `deploy/engine_args.py` writes the
deployment files' engine command lines from `sglang_args`, and tests/unit/deploy compares
every rendered engine with what the launcher passes for its model, rank and slots.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "DEV_MODEL",
    "MODEL_RECIPES",
    "ModelRecipe",
    "UnknownModel",
    "recipe_for",
    "require_recipe",
    "sglang_args",
]


class UnknownModel(KeyError):
    """A base model without a recipe: its engine flags would be guesses."""


@dataclass(frozen=True, slots=True)
class ModelRecipe:
    """The model-dependent engine flags of one base model."""

    name: str  # the folder name under /models, also the served model name
    sglang_tool_call_parser: str
    vllm_tool_call_parser: str
    # None: the model writes no separate reasoning section (SGLang --reasoning-parser).
    reasoning_parser: str | None = None
    # None: the chat template in the model's tokenizer_config.json.
    chat_template: str | None = None
    # Structured output written compact: a grammar that allows any whitespace lets a model
    # pad until max_tokens (docs/engines.md §8, §11).
    compact_json: bool = True
    # `all` is required when no adapter is given at start (docs/engines.md §1).
    lora_target_modules: str = "all"
    max_lora_rank: int = 64  # the largest rank class offered for this model


DEV_MODEL = ModelRecipe(
    # The generated dev model's chat template writes Qwen2.5 tool calls
    # (<tool_call>\n{"name", "arguments"}\n</tool_call>, loraplex.dev.corpus): SGLang's `qwen`
    # parser (`qwen25` is its deprecated alias in 0.5.23), vLLM's `hermes`.
    name="loraplex-tiny",
    sglang_tool_call_parser="qwen",
    vllm_tool_call_parser="hermes",
)

MODEL_RECIPES: dict[str, ModelRecipe] = {
    recipe.name: recipe
    for recipe in (
        DEV_MODEL,
        # Llama 3.1 writes JSON tool calls after <|python_tag|> or bare ({"name",
        # "parameters"}), read by SGLang's `llama3` parser and vLLM's `llama3_json`; it has
        # no reasoning section, and its own template handles tools.
        ModelRecipe(
            name="Llama-3.1-8B-Instruct",
            sglang_tool_call_parser="llama3",
            vllm_tool_call_parser="llama3_json",
        ),
    )
}


def require_recipe(model: str) -> ModelRecipe:
    """The recipe of `model` (a served model name); UnknownModel when there is none."""
    try:
        return MODEL_RECIPES[model]
    except KeyError:
        where = "loraplex.serving.engines.recipes.MODEL_RECIPES"
        raise UnknownModel(f"no engine recipe for {model!r}: add one to {where}") from None


def recipe_for(model: str) -> ModelRecipe:
    """The recipe of `model`, or the dev model's under that name for a model not listed
    (`loraplex engine start` on a generated test model); deployments use `require_recipe`."""
    return MODEL_RECIPES.get(model) or replace(DEV_MODEL, name=model)


def sglang_args(
    recipe: ModelRecipe,
    *,
    model_path: str,
    rank: str,
    gpu_slots: str,
    host_slots: str,
    host: str,
    port: str,
    api_key: str = "",
) -> list[str]:
    """SGLang's server flags (after `python -m sglang.launch_server`) on GPU.

    Values are strings so the deployment generator can pass placeholders (`RANK`) that
    kustomize fills in, and `$(VAR)` references the kubelet expands.
    """
    args = [
        "--model-path", model_path,
        "--served-model-name", recipe.name,
        "--host", host,
        "--port", port,
        "--enable-lora",
        "--max-lora-rank", rank,
        "--lora-target-modules", recipe.lora_target_modules,
        # GPU slots; a batch with base-model requests spends one of them on the base.
        "--max-loras-per-batch", gpu_slots,
        "--max-loaded-loras", host_slots,
        "--enable-metrics",
        "--sleep-on-idle",  # an idle scheduler otherwise spins on a whole core
        # `tools` (tool_choice "auto") answer `tool_calls` (docs/engines.md §1)
        "--tool-call-parser", recipe.sglang_tool_call_parser,
    ]  # fmt: skip
    if recipe.reasoning_parser:
        args += ["--reasoning-parser", recipe.reasoning_parser]
    if recipe.chat_template:
        args += ["--chat-template", recipe.chat_template]
    if recipe.compact_json:
        args.append("--constrained-json-disable-any-whitespace")
    if api_key:  # 0.5.23 leaves /health* and /metrics open (docs/engines.md §2.5)
        # one token: argparse would take a key starting with '-' for an option of its own
        args.append(f"--api-key={api_key}")
    return args
