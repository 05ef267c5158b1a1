"""Architecture facts of a base model, read from its config and safetensors headers only."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loraplex.adapters.errors import BaseModelUnsupported
from loraplex.adapters.safetensors_header import HeaderError, TensorEntry, read_header

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
PROJECTION_MODULES = ATTENTION_MODULES + MLP_MODULES

SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class BaseModelFacts:
    """What an adapter must agree with: layer count and each projection's (out, in) shape."""

    name: str
    architecture: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    max_context: int
    modules: dict[str, tuple[int, int]]
    chat_template_sha256: str


def module_group(module: str) -> str:
    """The decoder sub-block holding a projection: `self_attn` or `mlp`."""
    return "self_attn" if module in ATTENTION_MODULES else "mlp"


def read_base_model_facts(model_dir: Path, name: str | None = None) -> BaseModelFacts:
    """Read a Llama-style Hugging Face model directory's facts without loading weights."""
    config = _read_json(model_dir / "config.json")
    architectures = config.get("architectures") or [config.get("model_type", "")]
    num_layers = _config_int(config, "num_hidden_layers")
    tensors = _weight_headers(model_dir)
    return BaseModelFacts(
        name=name or model_dir.resolve().name,
        architecture=str(architectures[0]),
        hidden_size=_config_int(config, "hidden_size"),
        num_layers=num_layers,
        vocab_size=_config_int(config, "vocab_size"),
        max_context=_config_int(config, "max_position_embeddings"),
        modules=_projection_shapes(tensors, num_layers),
        chat_template_sha256=_chat_template_sha256(model_dir),
    )


def facts_to_json(facts: BaseModelFacts) -> dict[str, Any]:
    """A JSON-ready dict of the facts; module shapes become [out, in] lists."""
    return {
        "name": facts.name,
        "architecture": facts.architecture,
        "hidden_size": facts.hidden_size,
        "num_layers": facts.num_layers,
        "vocab_size": facts.vocab_size,
        "max_context": facts.max_context,
        "modules": {module: list(shape) for module, shape in facts.modules.items()},
        "chat_template_sha256": facts.chat_template_sha256,
    }


def facts_from_json(data: dict[str, Any]) -> BaseModelFacts:
    """Rebuild facts from `facts_to_json` output (or a database row's columns)."""
    return BaseModelFacts(
        name=str(data["name"]),
        architecture=str(data["architecture"]),
        hidden_size=int(data["hidden_size"]),
        num_layers=int(data["num_layers"]),
        vocab_size=int(data["vocab_size"]),
        max_context=int(data["max_context"]),
        modules={m: (int(shape[0]), int(shape[1])) for m, shape in data["modules"].items()},
        chat_template_sha256=str(data.get("chat_template_sha256", "")),
    )


def _read_json(path: Path) -> dict[str, Any]:
    """Load a JSON object, or explain why the directory is not a model."""
    if not path.is_file():
        raise BaseModelUnsupported(f"{path.parent} has no {path.name}; not a Hugging Face model")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaseModelUnsupported(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BaseModelUnsupported(f"{path} is not a JSON object")
    return data


def _config_int(config: dict[str, Any], field: str) -> int:
    """A positive integer field of config.json."""
    value = config.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BaseModelUnsupported(f"config.json has no positive integer {field!r}")
    return value


def _weight_headers(model_dir: Path) -> dict[str, TensorEntry]:
    """Every tensor entry across the single file or the shards named by the index."""
    if (model_dir / SHARD_INDEX).is_file():
        weight_map = _read_json(model_dir / SHARD_INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise BaseModelUnsupported(f"{SHARD_INDEX} has no weight_map")
        files = sorted({str(f) for f in weight_map.values()})
    elif (model_dir / SINGLE_FILE).is_file():
        files = [SINGLE_FILE]
    else:
        raise BaseModelUnsupported(
            f"{model_dir} has neither {SINGLE_FILE} nor {SHARD_INDEX}; "
            "only safetensors weights are supported"
        )
    tensors: dict[str, TensorEntry] = {}
    for file_name in files:
        # The index is data from the model's author: a shard must be a plain file name here.
        if Path(file_name).name != file_name or not (model_dir / file_name).is_file():
            raise BaseModelUnsupported(f"{SHARD_INDEX} names a missing shard {file_name!r}")
        try:
            tensors.update(read_header(model_dir / file_name).tensors)
        except HeaderError as exc:
            raise BaseModelUnsupported(f"corrupt weights: {exc}") from exc
    return tensors


def _projection_shapes(
    tensors: dict[str, TensorEntry], num_layers: int
) -> dict[str, tuple[int, int]]:
    """Each projection's (out, in) shape, which must be the same in every decoder layer."""
    shapes: dict[str, tuple[int, int]] = {}
    for module in PROJECTION_MODULES:
        for layer in range(num_layers):
            key = f"model.layers.{layer}.{module_group(module)}.{module}.weight"
            entry = tensors.get(key)
            if entry is None or len(entry.shape) != 2:
                raise BaseModelUnsupported(
                    f"weights have no 2-D tensor {key!r}; not a Llama-style decoder"
                )
            shape = (entry.shape[0], entry.shape[1])
            if shapes.setdefault(module, shape) != shape:
                raise BaseModelUnsupported(
                    f"{key} has shape {shape}, layer 0 has {shapes[module]}; "
                    "layers of different shapes are not supported"
                )
    return shapes


def _chat_template_sha256(model_dir: Path) -> str:
    """sha256 of the chat template text; chat_template.jinja wins over tokenizer_config.json."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return hashlib.sha256(jinja.read_bytes()).hexdigest()
    tokenizer_config = model_dir / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return ""
    template = _read_json(tokenizer_config).get("chat_template")
    if not template:
        return ""
    # Older tokenizers store a list of named templates; hash its canonical JSON form.
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
