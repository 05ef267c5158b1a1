"""Counts prompt tokens with the base model's own tokenizer, to refuse over-long prompts early.

The tokenizer (`tokenizer.json`, Rust `tokenizers`) is loaded once per base model from the
model's local folder. Chat prompts are counted as ChatML renders them (role header, content,
end marker); when a model's tokenizer is not available locally the check is left to the
engine, whose refusal the gateway still turns into an OpenAI 400.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger("loraplex.gateway")

CHATML_OVERHEAD = 3  # <|im_start|>assistant\n opened for the reply


@lru_cache(maxsize=16)
def _tokenizer(source: str) -> Any | None:
    path = Path(source) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the ml extra is not installed
        return None
    return Tokenizer.from_file(str(path))


def count_prompt_tokens(
    source: str, *, messages: list[dict[str, Any]] | None = None, prompt: str | None = None
) -> int | None:
    """Prompt tokens as the engine will count them, or None when the tokenizer is unknown."""
    tokenizer = _tokenizer(source)
    if tokenizer is None:
        return None
    if prompt is not None:
        return len(tokenizer.encode(prompt, add_special_tokens=False).ids)
    rendered = "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages or []
    )
    return len(tokenizer.encode(rendered, add_special_tokens=False).ids) + CHATML_OVERHEAD
