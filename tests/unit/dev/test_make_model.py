"""`make_model`: a deterministic, standard Llama chat model that loads through the Auto classes."""

import hashlib
import json
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from loraplex.dev.corpus import TOOL_TOKENS, tool_definitions
from loraplex.dev.make_model import make_model
from tests.unit.dev.test_chat_template import render

CHATML_PROMPT = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_seed_gives_byte_identical_weights(model_dir: Path, tmp_path: Path) -> None:
    again = make_model(tmp_path / "again", seed=0)
    assert _sha256(again / "model.safetensors") == _sha256(model_dir / "model.safetensors")
    assert _sha256(again / "tokenizer.json") == _sha256(model_dir / "tokenizer.json")


def test_a_different_seed_gives_different_weights(model_dir: Path, tmp_path: Path) -> None:
    other = make_model(tmp_path / "other", seed=1)
    assert _sha256(other / "model.safetensors") != _sha256(model_dir / "model.safetensors")


def test_config_is_a_standard_float32_llama_with_head_dim_64(model_dir: Path) -> None:
    config = AutoConfig.from_pretrained(model_dir)
    assert config.model_type == "llama"
    assert config.hidden_size // config.num_attention_heads == 64
    assert config.tie_word_embeddings is False
    assert config.max_position_embeddings == 4096
    assert json.loads((model_dir / "config.json").read_text())["torch_dtype"] == "float32"


def test_model_loads_through_auto_class(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert model.get_output_embeddings().weight.shape == (2048, 256)


def test_size_options_shape_the_model(tmp_path: Path) -> None:
    out = make_model(
        tmp_path / "small", hidden_size=128, num_layers=2, num_heads=2, vocab_size=1024
    )
    config = AutoConfig.from_pretrained(out)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (128, 2, 1024)


def test_chat_template_renders_chatml_with_generation_prompt(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], add_generation_prompt=True, tokenize=False
    )
    assert text == CHATML_PROMPT


def test_special_tokens_are_single_tokens(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert tokenizer.convert_ids_to_tokens(tokenizer.encode(token)) == [token]


def test_generation_stops_at_end_of_assistant_turn(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert tokenizer.eos_token == "<|im_end|>"
    assert generation["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.pad_token == "<|endoftext|>"


@pytest.mark.parametrize("text", ["The code word is amber.", "Ünïcode and emoji 🙂 survive"])
def test_tokenizer_round_trips_text(model_dir: Path, text: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tool_markers_are_single_tokens_that_decoding_keeps(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for token in TOOL_TOKENS:
        ids = tokenizer.encode(token)
        assert tokenizer.convert_ids_to_tokens(ids) == [token]
        assert token not in tokenizer.all_special_tokens
        assert tokenizer.decode(ids, skip_special_tokens=True) == token


def test_every_token_id_fits_the_models_vocabulary(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    assert max(tokenizer.get_vocab().values()) < config.vocab_size == 2048


def test_saved_template_renders_tools_as_the_template_tests_expect(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]
    text = tokenizer.apply_chat_template(
        messages, tools=tool_definitions(), add_generation_prompt=True, tokenize=False
    )
    assert text == render(messages, tools=tool_definitions())
