"""`make_model`: a small random Llama-architecture chat model, deterministic from a seed."""

import json
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from loraplex.dev.corpus import END_OF_TEXT, IM_END
from loraplex.dev.tokenizer import train_tokenizer


def make_model(
    out_dir: Path,
    seed: int = 0,
    *,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 4,
    intermediate_size: int = 512,
    vocab_size: int = 2048,
    max_context: int = 4096,
) -> Path:
    """Write config, safetensors weights, tokenizer and generation config to `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_context,
        tie_word_embeddings=False,
        # Qwen's convention for ChatML models: <|endoftext|> doubles as BOS and padding.
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    model = _random_model(config, seed)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    # The template goes into tokenizer_config.json, which every transformers release reads;
    # chat_template.jinja alone is unknown to the 4.x releases some engine images ship.
    tokenizer.model_max_length = max_context
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
    # transformers 5 records its new class name, which 4.x AutoTokenizer cannot resolve;
    # older engines (and 4.x) read torch_dtype, transformers 5 writes only dtype.
    _update_json(out_dir / "tokenizer_config.json", tokenizer_class="PreTrainedTokenizerFast")
    _update_json(out_dir / "config.json", torch_dtype="float32")
    return out_dir


def _update_json(path: Path, **updates: Any) -> None:
    """Set top-level keys in a JSON file, keeping its sorted, indented layout stable."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(updates)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _random_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """Initialise weights from `seed` alone, leaving the caller's global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model
