"""validate_adapter_dir: tensor names, shapes, ranks, values and file integrity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loraplex.adapters import AdapterRejected, Rejection, ValidationLimits, validate_adapter_dir
from tests.support.lora_files import (
    TINY_BASE,
    lora_tensor_name,
    lora_tensors,
    write_adapter,
    write_raw_safetensors,
)

WEIGHTS = "adapter_model.safetensors"


def rejection(folder: Path, limits: ValidationLimits) -> AdapterRejected:
    """The refusal validating `folder` raises."""
    with pytest.raises(AdapterRejected) as caught:
        validate_adapter_dir(folder, TINY_BASE, limits)
    return caught.value


def adapter_with(tmp_path: Path, changes: dict[str, np.ndarray | None], **kwargs) -> Path:
    """A valid rank-4 adapter with tensors replaced, added, or (for None) removed."""
    tensors: dict[str, np.ndarray] = lora_tensors(rank=4, **kwargs)
    for name, value in changes.items():
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    return write_adapter(tmp_path / "a", rank=4, tensors=tensors, **kwargs)


def test_tensor_with_an_unknown_name_is_refused(tmp_path, limits):
    name = "base_model.model.model.layers.0.self_attn.rotary_emb.inv_freq"
    error = rejection(adapter_with(tmp_path, {name: np.zeros(8, "f4")}), limits)
    assert error.code == Rejection.UNKNOWN_TENSOR
    assert name in error.message


def test_tensor_for_a_module_in_the_wrong_block_is_refused(tmp_path, limits):
    name = "base_model.model.model.layers.0.mlp.q_proj.lora_A.weight"
    error = rejection(adapter_with(tmp_path, {name: np.zeros((4, 64), "f4")}), limits)
    assert error.code == Rejection.UNKNOWN_TENSOR
    assert name in error.message


def test_tensor_for_a_layer_the_base_lacks_is_refused(tmp_path, limits):
    name = lora_tensor_name(2, "q_proj", "A")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((4, 64), "f4")}), limits)
    assert error.code == Rejection.UNKNOWN_TENSOR
    assert "2 layers" in error.message


def test_tensor_for_a_module_outside_target_modules_is_refused(tmp_path, limits):
    name = lora_tensor_name(0, "o_proj", "A")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((4, 64), "f4")}), limits)
    assert error.code == Rejection.UNKNOWN_TENSOR
    assert "target_modules" in error.message


def test_embedding_tensor_is_refused_as_added_tokens(tmp_path, limits):
    name = "base_model.model.model.embed_tokens.weight"
    error = rejection(adapter_with(tmp_path, {name: np.zeros((260, 64), "f4")}), limits)
    assert error.code == Rejection.ADDED_TOKENS
    assert name in error.message


def test_lm_head_tensor_is_refused_as_added_tokens(tmp_path, limits):
    name = "base_model.model.lm_head.weight"
    error = rejection(adapter_with(tmp_path, {name: np.zeros((260, 64), "f4")}), limits)
    assert error.code == Rejection.ADDED_TOKENS


def test_dora_magnitude_tensor_is_refused(tmp_path, limits):
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"
    error = rejection(adapter_with(tmp_path, {name: np.ones(64, "f4")}), limits)
    assert error.code == Rejection.DORA


def test_lora_a_for_a_different_hidden_size_is_refused(tmp_path, limits):
    name = lora_tensor_name(0, "q_proj", "A")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((4, 128), "f4")}), limits)
    assert error.code == Rejection.SHAPE_MISMATCH
    assert "[4, 64]" in error.message


def test_lora_b_with_wrong_out_features_is_refused(tmp_path, limits):
    # v_proj is 32 wide in the tiny base (2 KV heads); 64 is q_proj's width.
    name = lora_tensor_name(1, "v_proj", "B")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((64, 4), "f4")}), limits)
    assert error.code == Rejection.SHAPE_MISMATCH
    assert "[32, 4]" in error.message


def test_tensor_rank_different_from_config_r_is_refused(tmp_path, limits):
    name = lora_tensor_name(0, "q_proj", "A")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((8, 64), "f4")}), limits)
    assert error.code == Rejection.RANK_MISMATCH
    assert "r=4" in error.message


def test_lora_a_without_its_lora_b_is_refused(tmp_path, limits):
    error = rejection(adapter_with(tmp_path, {lora_tensor_name(1, "q_proj", "B"): None}), limits)
    assert error.code == Rejection.MISSING_TENSOR
    assert "lora_B" in error.message


def test_target_module_without_any_tensors_is_refused(tmp_path, limits):
    folder = write_adapter(
        tmp_path / "a",
        targets=("q_proj", "v_proj"),
        tensors=lora_tensors(rank=4, targets=("q_proj",)),
    )
    error = rejection(folder, limits)
    assert error.code == Rejection.MISSING_TENSOR
    assert "v_proj" in error.message


def test_integer_tensor_is_refused(tmp_path, limits):
    name = lora_tensor_name(0, "q_proj", "A")
    error = rejection(adapter_with(tmp_path, {name: np.zeros((4, 64), "i4")}), limits)
    assert error.code == Rejection.UNSUPPORTED_DTYPE


def test_nan_value_is_refused(tmp_path, limits):
    name = lora_tensor_name(1, "down_proj", "B")
    bad = np.zeros((64, 4), "f4")
    bad[3, 2] = np.nan
    error = rejection(adapter_with(tmp_path, {name: bad}), limits)
    assert error.code == Rejection.NON_FINITE
    assert name in error.message


def test_infinity_in_float16_is_refused(tmp_path, limits):
    tensors = lora_tensors(rank=4, dtype=np.float16)
    tensors[lora_tensor_name(0, "q_proj", "A")][0, 0] = np.inf
    folder = write_adapter(tmp_path / "a", rank=4, tensors=tensors)
    assert rejection(folder, limits).code == Rejection.NON_FINITE


def bf16_adapter(tmp_path: Path, poison: bytes | None) -> Path:
    """A q_proj-only adapter stored as BF16; `poison` replaces the first value's bytes."""
    folder = write_adapter(tmp_path / "a", targets=("q_proj",))
    entries = {}
    for name, array in lora_tensors(rank=4, targets=("q_proj",)).items():
        # bfloat16 is the top half of a float32.
        data = (array.view("<u4") >> 16).astype("<u2").tobytes()
        entries[name] = ("BF16", list(array.shape), data)
    if poison is not None:
        first = next(iter(entries))
        dtype, shape, data = entries[first]
        entries[first] = (dtype, shape, poison + data[2:])
    write_raw_safetensors(folder / WEIGHTS, entries)
    return folder


def test_bf16_adapter_is_accepted(tmp_path, limits):
    assert validate_adapter_dir(bf16_adapter(tmp_path, None), TINY_BASE, limits).rank == 4


def test_nan_in_bf16_is_refused(tmp_path, limits):
    nan_bf16 = (0x7FC0).to_bytes(2, "little")
    assert rejection(bf16_adapter(tmp_path, nan_bf16), limits).code == Rejection.NON_FINITE


def test_truncated_safetensors_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    weights = folder / WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-100])
    error = rejection(folder, limits)
    assert error.code == Rejection.CORRUPT_SAFETENSORS
    assert "truncated" in error.message


def test_safetensors_with_a_garbage_header_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    blob = b"this is not json"
    (folder / WEIGHTS).write_bytes(len(blob).to_bytes(8, "little") + blob)
    assert rejection(folder, limits).code == Rejection.CORRUPT_SAFETENSORS


def test_safetensors_declaring_a_header_longer_than_the_file_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    (folder / WEIGHTS).write_bytes((10**9).to_bytes(8, "little") + b"{}")
    assert rejection(folder, limits).code == Rejection.CORRUPT_SAFETENSORS


def test_safetensors_with_overlapping_tensors_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", targets=("q_proj",))
    a, b = lora_tensor_name(0, "q_proj", "A"), lora_tensor_name(0, "q_proj", "B")
    data = np.zeros(4 * 64, "f4").tobytes()
    write_raw_safetensors(folder / WEIGHTS, {a: ("F32", [4, 64], data)})
    # Point lora_B at lora_A's bytes by rewriting the header by hand.
    raw = (folder / WEIGHTS).read_bytes()
    header = raw[8 : 8 + int.from_bytes(raw[:8], "little")].decode()
    spec = f'"{b}": {{"dtype": "F32", "shape": [64, 4], "data_offsets": [0, {len(data)}]}}, '
    header = "{" + spec + header[1:]
    (folder / WEIGHTS).write_bytes(len(header).to_bytes(8, "little") + header.encode() + data)
    assert rejection(folder, limits).code == Rejection.CORRUPT_SAFETENSORS
