"""read_base_model_facts: architecture facts from config and safetensors headers."""

from __future__ import annotations

import hashlib
import json

import pytest

from loraplex.adapters import (
    BaseModelUnsupported,
    facts_from_json,
    facts_to_json,
    read_base_model_facts,
)
from tests.support.lora_files import TINY_BASE, write_base_model

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_facts_are_read_from_a_single_file_model(tmp_path):
    folder = write_base_model(tmp_path / "tiny-llama")
    facts = read_base_model_facts(folder)
    assert facts == TINY_BASE


def test_facts_are_read_from_a_sharded_model(tmp_path):
    folder = write_base_model(tmp_path / "m", shards=3)
    facts = read_base_model_facts(folder, name="tiny-llama")
    assert facts.modules == TINY_BASE.modules
    assert facts.num_layers == 2


def test_name_defaults_to_the_directory_name(tmp_path):
    assert read_base_model_facts(write_base_model(tmp_path / "my-model")).name == "my-model"


def test_chat_template_in_tokenizer_config_is_hashed(tmp_path):
    folder = write_base_model(tmp_path / "m")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    facts = read_base_model_facts(folder)
    assert facts.chat_template_sha256 == hashlib.sha256(CHATML.encode()).hexdigest()


def test_chat_template_jinja_file_wins_over_tokenizer_config(tmp_path):
    folder = write_base_model(tmp_path / "m")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old"}))
    (folder / "chat_template.jinja").write_text(CHATML)
    facts = read_base_model_facts(folder)
    assert facts.chat_template_sha256 == hashlib.sha256(CHATML.encode()).hexdigest()


def test_model_without_chat_template_has_an_empty_hash(tmp_path):
    assert read_base_model_facts(write_base_model(tmp_path / "m")).chat_template_sha256 == ""


def test_facts_survive_a_json_round_trip(tmp_path):
    stored = json.loads(json.dumps(facts_to_json(TINY_BASE)))
    assert stored["modules"]["k_proj"] == [32, 64]
    assert facts_from_json(stored) == TINY_BASE


def test_directory_without_config_is_not_a_model(tmp_path):
    with pytest.raises(BaseModelUnsupported, match=r"config\.json"):
        read_base_model_facts(tmp_path)


def test_model_with_only_pickle_weights_is_unsupported(tmp_path):
    folder = write_base_model(tmp_path / "m")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(BaseModelUnsupported, match="safetensors"):
        read_base_model_facts(folder)


def test_model_without_llama_projections_is_unsupported(tmp_path):
    folder = write_base_model(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 3  # the weights only have two decoder layers
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BaseModelUnsupported, match=r"model\.layers\.2\."):
        read_base_model_facts(folder)


def test_config_without_hidden_size_is_unsupported(tmp_path):
    folder = write_base_model(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    del config["hidden_size"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BaseModelUnsupported, match="hidden_size"):
        read_base_model_facts(folder)


def test_shard_index_pointing_outside_the_directory_is_refused(tmp_path):
    folder = write_base_model(tmp_path / "m", shards=2)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(BaseModelUnsupported, match="elsewhere"):
        read_base_model_facts(folder)
