"""validate_adapter_dir: the files and adapter_config.json."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from loraplex.adapters import AdapterRejected, Rejection, ValidationLimits, validate_adapter_dir
from tests.support.lora_files import DELETE, TINY_BASE, write_adapter


def rejection(folder: Path, limits: ValidationLimits) -> AdapterRejected:
    """The refusal validating `folder` raises."""
    with pytest.raises(AdapterRejected) as caught:
        validate_adapter_dir(folder, TINY_BASE, limits)
    return caught.value


def test_valid_adapter_is_accepted_with_its_facts(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", rank=4, targets=("v_proj", "q_proj"))
    weights = (folder / "adapter_model.safetensors").read_bytes()

    facts = validate_adapter_dir(folder, TINY_BASE, limits)

    assert facts.rank == 4
    assert facts.alpha == 8.0
    assert facts.target_modules == ("q_proj", "v_proj")
    assert facts.sha256 == hashlib.sha256(weights).hexdigest()
    assert facts.size_bytes == len(weights)
    assert facts.tensor_count == 2 * 2 * 2  # layers x modules x (A, B)
    assert facts.base_model_name == "tiny-llama"


def test_readme_is_allowed_next_to_the_adapter(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", readme=True)
    assert validate_adapter_dir(folder, TINY_BASE, limits).rank == 4


def test_config_that_is_not_json_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    (folder / "adapter_config.json").write_text("{not json")
    error = rejection(folder, limits)
    assert error.code == Rejection.BAD_CONFIG
    assert "adapter_config.json" in error.message


@pytest.mark.parametrize("field", ["peft_type", "r", "lora_alpha", "target_modules"])
def test_config_missing_a_required_field_is_refused(tmp_path, limits, field):
    folder = write_adapter(tmp_path / "a", config={field: DELETE})
    error = rejection(folder, limits)
    assert error.code == Rejection.BAD_CONFIG
    assert field in error.message


def test_rank_that_is_not_a_positive_integer_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"r": "4"})
    assert rejection(folder, limits).code == Rejection.BAD_CONFIG


def test_peft_type_other_than_lora_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"peft_type": "IA3"})
    error = rejection(folder, limits)
    assert error.code == Rejection.NOT_LORA
    assert "IA3" in error.message


def test_dora_config_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"use_dora": True})
    assert rejection(folder, limits).code == Rejection.DORA


def test_modules_to_save_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"modules_to_save": ["lm_head"]})
    error = rejection(folder, limits)
    assert error.code == Rejection.MODULES_TO_SAVE
    assert "lm_head" in error.message


def test_trainable_tokens_are_refused_as_added_tokens(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"trainable_token_indices": [5, 6]})
    assert rejection(folder, limits).code == Rejection.ADDED_TOKENS


def test_target_module_outside_the_supported_set_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"target_modules": ["q_proj", "lm_head"]})
    error = rejection(folder, limits)
    assert error.code == Rejection.UNSUPPORTED_TARGET
    assert "lm_head" in error.message


def test_target_modules_given_as_a_regex_are_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"target_modules": r".*\.(q|v)_proj"})
    error = rejection(folder, limits)
    assert error.code == Rejection.BAD_CONFIG
    assert "list the module names" in error.message


def test_dotted_target_module_names_are_reduced_to_the_module(tmp_path, limits):
    targets = ["self_attn.q_proj", "v_proj", "mlp.down_proj"]
    folder = write_adapter(tmp_path / "a", config={"target_modules": targets})
    facts = validate_adapter_dir(folder, TINY_BASE, limits)
    assert facts.target_modules == ("down_proj", "q_proj", "v_proj")


def test_rank_above_the_limit_is_refused_naming_the_limit(tmp_path):
    folder = write_adapter(tmp_path / "a", rank=32)
    error = rejection(folder, ValidationLimits(max_rank=16, max_bytes=10**7))
    assert error.code == Rejection.RANK_TOO_HIGH
    assert "16" in error.message


def test_rank_pattern_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a", config={"rank_pattern": {"q_proj": 8}})
    error = rejection(folder, limits)
    assert error.code == Rejection.BAD_CONFIG
    assert "rank_pattern" in error.message


def test_adapter_for_a_different_base_model_is_refused(tmp_path, limits):
    folder = write_adapter(
        tmp_path / "a", config={"base_model_name_or_path": "meta-llama/Llama-3.1-8B"}
    )
    error = rejection(folder, limits)
    assert error.code == Rejection.WRONG_BASE_MODEL
    assert "meta-llama/Llama-3.1-8B" in error.message


@pytest.mark.parametrize(
    "declared", ["/models/tiny-llama/", "someorg/Tiny-Llama", "/tmp/tmpx1/checkpoint", None]
)
def test_base_model_paths_and_matching_ids_are_accepted(tmp_path, limits, declared):
    folder = write_adapter(tmp_path / "a", config={"base_model_name_or_path": declared})
    assert validate_adapter_dir(folder, TINY_BASE, limits).rank == 4


def test_weights_over_the_size_cap_are_refused(tmp_path):
    folder = write_adapter(tmp_path / "a")
    error = rejection(folder, ValidationLimits(max_rank=16, max_bytes=1000))
    assert error.code == Rejection.TOO_LARGE
    assert "1000" in error.message


def test_pickle_weights_in_the_directory_are_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    (folder / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")
    error = rejection(folder, limits)
    assert error.code == Rejection.PICKLE_WEIGHTS
    assert "adapter_model.bin" in error.message


def test_extra_file_in_the_directory_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    (folder / "training_args.json").write_text("{}")
    error = rejection(folder, limits)
    assert error.code == Rejection.EXTRA_FILE
    assert "training_args.json" in error.message


def test_directory_without_weights_is_refused(tmp_path, limits):
    folder = write_adapter(tmp_path / "a")
    (folder / "adapter_model.safetensors").unlink()
    error = rejection(folder, limits)
    assert error.code == Rejection.MISSING_FILE
    assert "adapter_model.safetensors" in error.message
