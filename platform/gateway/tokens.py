"""Counts prompt tokens with the base model's own tokenizer, to refuse over-long prompts early.

The tokenizer (`tokenizer.json`, Rust `tokenizers`) is loaded once per base model from the
model's local folder. Chat prompts are rendered with the model's own chat template (from
`tokenizer_config.json`, in a Jinja sandbox, as engines render it), so tools, tool calls and
tool results count as the engine will count them; a model without a template (or one whose
template needs what the sandbox lacks) is counted as ChatML renders it. When a model's
tokenizer is not available locally the check is left to the engine, whose refusal the
gateway still turns into an OpenAI 400.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

log = logging.getLogger("loraplex.gateway")

CHATML_OVERHEAD = 3  # <|im_start|>assistant\n opened for the reply
PIECE_CHARS = 16_384  # a long prompt is counted in pieces this long (see `_count`)
CUT_SLACK = 4  # tokens one cut between pieces may add, at most
# A prompt this short, of a model whose tokenizer is loaded, is counted on the event loop:
# a fraction of a millisecond, less than handing it to a thread and back (issue #50).
INLINE_CHARS = 2_000
_loaded: set[str] = set()  # base models whose tokenizer and template are loaded (or absent)


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


def _raise(message: str) -> None:
    raise TemplateError(message)


@lru_cache(maxsize=16)
def _template(source: str) -> Any | None:
    """The model's chat template, compiled, or None when it has none we can read."""
    path = Path(source) / "tokenizer_config.json"
    try:
        text = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError):
        return None
    if not isinstance(text, str):
        return None  # absent, or a list of named templates
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)
    env.globals["raise_exception"] = _raise
    try:
        return env.from_string(text)
    except TemplateError as exc:
        log.info("chat template of %s does not compile here (%s); counting as ChatML", source, exc)
        return None


def vocab_size(source: str) -> int | None:
    """The base model's vocabulary size, or None when its tokenizer is not available here."""
    tokenizer = _tokenizer(source)
    return tokenizer.get_vocab_size(with_added_tokens=True) if tokenizer is not None else None


def count_prompt_tokens(
    source: str,
    *,
    messages: list[dict[str, Any]] | None = None,
    prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    limit: int | None = None,
) -> int | None:
    """Prompt tokens as the engine will count them, or None when the tokenizer is unknown.

    With `limit` (the model's context), a prompt that is surely longer stops being counted
    as soon as that is certain, and the count so far (over `limit`) is returned. Call it off
    the event loop unless `cheap_to_count`: a long prompt takes a second to render and count."""
    tokenizer = _tokenizer(source)
    if tokenizer is not None:
        _template(source)
    _loaded.add(source)
    if tokenizer is None:
        return None
    if prompt is not None:
        return _count(tokenizer, prompt, limit)
    rendered = _rendered(source, messages or [], tools)
    if rendered is not None:
        return _count(tokenizer, rendered, limit)
    chatml = "".join(
        f"<|im_start|>{m['role']}\n{m['content']}{_calls(m)}<|im_end|>\n" for m in messages or []
    )
    if tools:
        chatml = json.dumps(tools) + chatml
    return _count(tokenizer, chatml, limit) + CHATML_OVERHEAD


def cheap_to_count(
    source: str,
    *,
    messages: list[dict[str, Any]] | None = None,
    prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> bool:
    """Whether `count_prompt_tokens` may run on the event loop: it has counted for this
    model before (its tokenizer is loaded, or it has none here) and the prompt is short
    plain text, with no tools."""
    if tools or source not in _loaded:  # loading a tokenizer takes a while
        return False
    if prompt is not None:
        return len(prompt) <= INLINE_CHARS
    total = 0
    for message in messages or []:
        content = message.get("content")
        if not (content is None or isinstance(content, str)) or message.get("tool_calls"):
            return False
        total += len(content or "")
    return total <= INLINE_CHARS


def _count(tokenizer: Any, text: str, limit: int | None) -> int:
    """Tokens in `text`, exactly, unless it is surely more than `limit`.

    A tokenizer's encoding costs ~800 bytes a token (ids, offsets, token strings): a 1 MB
    prompt took 200 MB to count whole. So a long text is first counted in pieces of about
    `PIECE_CHARS`, each cut just before a space where there is one: there the tokenizers'
    pre-tokenizers split anyway, and a cut changes the count by a token or two. Once the
    pieces' sum less `CUT_SLACK` a cut is over `limit`, the text is over it and counting stops
    there; a text that stays under is then counted whole, exactly."""
    if limit is None or len(text) <= PIECE_CHARS:
        return _tokens(tokenizer, text)
    total = cuts = start = 0
    while start < len(text):
        end = start + PIECE_CHARS
        space = text.rfind(" ", start + PIECE_CHARS // 2, end)
        end = space if space > start and end < len(text) else end
        total += _tokens(tokenizer, text[start:end])
        if total - CUT_SLACK * cuts > limit:
            return total - CUT_SLACK * cuts
        start, cuts = end, cuts + 1
    return _tokens(tokenizer, text)


def _tokens(tokenizer: Any, text: str) -> int:
    """`encode_batch`, not `encode`: only the batch call lets go of the GIL while Rust works
    (measured with tokenizers 0.23 on a 1 MB prompt: `encode` in a thread still paused the
    event loop 0.70 s, `encode_batch` 0.06 s); `len()` of the encoding builds no id list."""
    return len(tokenizer.encode_batch([text], add_special_tokens=False)[0])


def _rendered(
    source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str | None:
    template = _template(source)
    if template is None:
        return None
    try:
        return str(
            template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=True,
                bos_token="",
                eos_token="",
            )
        )
    except (TemplateError, TypeError, ValueError) as exc:
        log.info("chat template of %s failed on a request (%s); counting as ChatML", source, exc)
        return None


def _calls(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls")
    return json.dumps([call["function"] for call in calls]) if calls else ""
