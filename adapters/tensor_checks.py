"""Checks an adapter's tensors against its config and the base model, then scans their values."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from loraplex.adapters.errors import AdapterRejected, Rejection
from loraplex.adapters.facts import BaseModelFacts, module_group
from loraplex.adapters.peft_config import LoraConfig
from loraplex.adapters.safetensors_header import SafetensorsHeader, TensorEntry

# PEFT's saved names (the adapter name is stripped on save).
LORA_TENSOR = re.compile(
    r"base_model\.model\.model\.layers\.(?P<layer>\d+)\.(?P<group>self_attn|mlp)\."
    r"(?P<module>\w+)\.lora_(?P<side>[AB])\.weight"
)
EXAMPLE_NAME = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
FLOAT_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2"}
# Multiple of every element size, so a chunk never splits a value.
SCAN_CHUNK_BYTES = 4 * 1024 * 1024
BF16_EXPONENT = 0x7F80  # all exponent bits set: Inf or NaN


def check_tensors(header: SafetensorsHeader, config: LoraConfig, base: BaseModelFacts) -> None:
    """Every tensor is a LoRA A/B of a targeted base projection with the right shape and rank."""
    pairs: dict[tuple[int, str], set[str]] = {}
    for entry in header.tensors.values():
        layer, module, side = _parse_name(entry.name, config, base)
        _check_shape(entry, module, side, config.rank, base)
        pairs.setdefault((layer, module), set()).add(side)
    for (layer, module), sides in sorted(pairs.items()):
        if sides != {"A", "B"}:
            missing = "lora_B" if "A" in sides else "lora_A"
            raise AdapterRejected(
                Rejection.MISSING_TENSOR, f"layer {layer} {module} has no {missing} tensor"
            )
    covered = {module for _, module in pairs}
    for module in config.target_modules:
        if module not in covered:
            raise AdapterRejected(
                Rejection.MISSING_TENSOR, f"target module {module} has no tensors in any layer"
            )


def _parse_name(name: str, config: LoraConfig, base: BaseModelFacts) -> tuple[int, str, str]:
    """(layer, module, A|B) of a tensor name, or the refusal explaining what it is instead."""
    if "embed_tokens" in name or "lm_head" in name or "lora_embedding_" in name:
        raise AdapterRejected(
            Rejection.ADDED_TOKENS,
            f"tensor {name} changes the embeddings or output head (added tokens or a resized "
            "vocabulary); engines cannot serve that",
        )
    if "lora_magnitude_vector" in name:
        raise AdapterRejected(Rejection.DORA, f"tensor {name} is a DoRA magnitude vector")
    match = LORA_TENSOR.fullmatch(name)
    if match is None:
        raise AdapterRejected(
            Rejection.UNKNOWN_TENSOR,
            f"tensor {name} is not a LoRA weight of a decoder projection "
            f"(expected names like {EXAMPLE_NAME})",
        )
    layer, module = int(match["layer"]), match["module"]
    if module not in base.modules or match["group"] != module_group(module):
        raise AdapterRejected(
            Rejection.UNKNOWN_TENSOR, f"tensor {name}: base model {base.name} has no such module"
        )
    if layer >= base.num_layers:
        raise AdapterRejected(
            Rejection.UNKNOWN_TENSOR,
            f"tensor {name} is for layer {layer}, but base model {base.name} has "
            f"{base.num_layers} layers",
        )
    if module not in config.target_modules:
        raise AdapterRejected(
            Rejection.UNKNOWN_TENSOR, f"tensor {name} is for {module}, not in target_modules"
        )
    return layer, module, match["side"]


def _check_shape(
    entry: TensorEntry, module: str, side: str, rank: int, base: BaseModelFacts
) -> None:
    """lora_A is (r, in_features) and lora_B is (out_features, r) of the base projection."""
    if entry.dtype not in FLOAT_DTYPES:
        raise AdapterRejected(
            Rejection.UNSUPPORTED_DTYPE,
            f"tensor {entry.name} is {entry.dtype}; use F32, F16 or BF16",
        )
    if len(entry.shape) != 2:
        raise AdapterRejected(
            Rejection.SHAPE_MISMATCH, f"tensor {entry.name} has shape {list(entry.shape)}, not 2-D"
        )
    out_features, in_features = base.modules[module]
    tensor_rank, width = (entry.shape[0], entry.shape[1]) if side == "A" else entry.shape[::-1]
    if tensor_rank != rank:
        raise AdapterRejected(
            Rejection.RANK_MISMATCH,
            f"tensor {entry.name} has rank {tensor_rank} but adapter_config.json says r={rank}",
        )
    expected_width = in_features if side == "A" else out_features
    if width != expected_width:
        expected = [rank, in_features] if side == "A" else [out_features, rank]
        raise AdapterRejected(
            Rejection.SHAPE_MISMATCH,
            f"tensor {entry.name} has shape {list(entry.shape)}, expected {expected} for "
            f"{module} of base model {base.name}",
        )


def scan_values(path: Path, header: SafetensorsHeader) -> str:
    """Refuse NaN/Inf values while reading the file once in chunks; return its sha256."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        digest.update(_read_exactly(f, header.data_start, path.name))
        # The header check guarantees the tensors tile the rest of the file in this order.
        for entry in sorted(header.tensors.values(), key=lambda e: e.start):
            bad = 0
            for chunk in _chunks(f, entry.nbytes, path.name):
                digest.update(chunk)
                bad += _count_non_finite(chunk, entry.dtype)
            if bad:
                raise AdapterRejected(
                    Rejection.NON_FINITE, f"tensor {entry.name} has {bad} NaN or Inf values"
                )
    return digest.hexdigest()


def _chunks(f: BinaryIO, nbytes: int, file_name: str) -> Iterable[bytes]:
    """The next `nbytes` of the file in bounded chunks."""
    left = nbytes
    while left:
        chunk = _read_exactly(f, min(left, SCAN_CHUNK_BYTES), file_name)
        left -= len(chunk)
        yield chunk


def _read_exactly(f: BinaryIO, size: int, file_name: str) -> bytes:
    """Read `size` bytes or refuse the file as truncated (it changed under us)."""
    data = f.read(size)
    if len(data) != size:
        raise AdapterRejected(Rejection.CORRUPT_SAFETENSORS, f"{file_name} is truncated")
    return data


def _count_non_finite(chunk: bytes, dtype: str) -> int:
    """How many values in a chunk of one float dtype are NaN or infinite."""
    values = np.frombuffer(chunk, dtype=FLOAT_DTYPES[dtype])
    if dtype == "BF16":  # numpy has no bfloat16: test the exponent bits directly
        return int(np.count_nonzero((values & BF16_EXPONENT) == BF16_EXPONENT))
    return int(values.size - np.count_nonzero(np.isfinite(values)))
