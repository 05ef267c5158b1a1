"""Token ids of a byte-level BPE vocabulary that are parts of multi-byte characters.

The generated dev model is random: now and then it picks such a byte token, and the engines
then hold the stream back until the character completes, which for a random model may take
the rest of the reply (seen on vLLM and SGLang: a 3000-token reply sent in one piece at the
end). Tests that need a steady stream send these ids in `logit_bias` at -100.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path


@cache
def partial_character_ids(model_dir: Path) -> tuple[int, ...]:
    """The ids whose token holds a byte of 0x80 or above (GPT-2's byte alphabet)."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    to_byte = {char: byte for byte, char in enumerate(_byte_alphabet())}
    return tuple(
        sorted(i for token, i in vocab.items() if any(to_byte.get(c, 0) >= 0x80 for c in token))
    )


def steady_stream_bias(model_dir: Path) -> dict[str, float]:
    """`logit_bias` that keeps a random model's stream flowing."""
    return {str(i): -100 for i in partial_character_ids(model_dir)}


def _byte_alphabet() -> list[str]:
    """The character byte-level BPE writes each byte 0-255 as, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in chars]
    chars.update({b: chr(256 + i) for i, b in enumerate(others)})
    return [chars[b] for b in range(256)]
