"""Builders for small PEFT LoRA adapter directories and base models, written with numpy."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from loraplex.adapters.facts import BaseModelFacts, module_group

# hidden 64, 2 layers, intermediate 128, 4 query heads and 2 KV heads of 16: k/v are narrower
# than q, so a tensor built for the wrong projection shows up as a shape mismatch.
TINY_BASE = BaseModelFacts(
    name="tiny-llama",
    architecture="LlamaForCausalLM",
    hidden_size=64,
    num_layers=2,
    vocab_size=256,
    max_context=512,
    modules={
        "q_proj": (64, 64),
        "k_proj": (32, 64),
        "v_proj": (32, 64),
        "o_proj": (64, 64),
        "gate_proj": (128, 64),
        "up_proj": (128, 64),
        "down_proj": (64, 128),
    },
    chat_template_sha256="",
)

DEFAULT_TARGETS = ("q_proj", "v_proj", "down_proj")
DELETE = object()  # an override value that removes the config field


def lora_tensor_name(layer: int, module: str, side: str) -> str:
    """PEFT's saved name of one LoRA factor."""
    group = module_group(module)
    return f"base_model.model.model.layers.{layer}.{group}.{module}.lora_{side}.weight"


def lora_tensors(
    base: BaseModelFacts = TINY_BASE,
    rank: int = 4,
    targets: Iterable[str] = DEFAULT_TARGETS,
    dtype: Any = np.float32,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Random A/B factors for every layer and target module, shaped like PEFT's."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(base.num_layers):
        for module in targets:
            out_features, in_features = base.modules[module]
            a = rng.standard_normal((rank, in_features)) * 0.01
            b = rng.standard_normal((out_features, rank)) * 0.01
            tensors[lora_tensor_name(layer, module, "A")] = a.astype(dtype)
            tensors[lora_tensor_name(layer, module, "B")] = b.astype(dtype)
    return tensors


def lora_config(
    rank: int = 4, targets: Iterable[str] = DEFAULT_TARGETS, **overrides: Any
) -> dict[str, Any]:
    """An adapter_config.json as PEFT writes it; an override of DELETE removes a field."""
    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": TINY_BASE.name,
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(targets),
        "bias": "none",
        "use_dora": False,
        "modules_to_save": None,
    }
    for key, value in overrides.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def write_adapter(
    folder: Path,
    *,
    rank: int = 4,
    targets: Iterable[str] = DEFAULT_TARGETS,
    config: Mapping[str, Any] | None = None,
    tensors: Mapping[str, np.ndarray] | None = None,
    readme: bool = False,
) -> Path:
    """Write a valid adapter into `folder`, or one altered by `config` overrides / `tensors`."""
    targets = tuple(targets)
    folder.mkdir(parents=True, exist_ok=True)
    settings = lora_config(rank, targets, **dict(config or {}))
    (folder / "adapter_config.json").write_text(json.dumps(settings))
    weights = dict(tensors) if tensors is not None else lora_tensors(rank=rank, targets=targets)
    save_file(weights, str(folder / "adapter_model.safetensors"))
    if readme:
        (folder / "README.md").write_text("# tiny adapter\n")
    return folder


def write_base_model(folder: Path, base: BaseModelFacts = TINY_BASE, *, shards: int = 1) -> Path:
    """Write a Llama-style model directory (config, tokenizer config, zero weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": [base.architecture],
        "model_type": "llama",
        "hidden_size": base.hidden_size,
        "num_hidden_layers": base.num_layers,
        "vocab_size": base.vocab_size,
        "max_position_embeddings": base.max_context,
        "intermediate_size": base.modules["gate_proj"][0],
    }
    (folder / "config.json").write_text(json.dumps(config))
    weights = {"model.embed_tokens.weight": np.zeros((base.vocab_size, base.hidden_size), "f4")}
    for layer in range(base.num_layers):
        for module, shape in base.modules.items():
            name = f"model.layers.{layer}.{module_group(module)}.{module}.weight"
            weights[name] = np.zeros(shape, dtype=np.float32)
    _save_weights(folder, weights, shards)
    return folder


def _save_weights(folder: Path, weights: dict[str, np.ndarray], shards: int) -> None:
    """One model.safetensors, or `shards` files with a model.safetensors.index.json."""
    if shards == 1:
        save_file(weights, str(folder / "model.safetensors"))
        return
    names = sorted(weights)
    weight_map = {}
    for index in range(shards):
        file_name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        part = names[index::shards]
        save_file({n: weights[n] for n in part}, str(folder / file_name))
        weight_map.update(dict.fromkeys(part, file_name))
    index_doc = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index_doc))


def write_raw_safetensors(path: Path, tensors: Mapping[str, tuple[str, list[int], bytes]]) -> Path:
    """Write a safetensors file by hand: for dtypes numpy lacks (BF16) or broken files."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    blob = json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for _, _, data in tensors.values():
            f.write(data)
    return path
