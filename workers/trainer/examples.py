"""Training rows from OpenAI-format JSONL: chat rows tokenized with the loss on assistant turns.

The model's own chat template renders each conversation, so the trainer sees exactly the
text an engine will build for the same messages. The template is rendered one message at a
time and the text between renders is tokenized piece by piece: that is how each assistant
turn's tokens are found without knowing the template's markers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # labels the loss skips (transformers' convention)

Message = dict[str, Any]


@dataclass(frozen=True)
class TokenizedRow:
    """One conversation's token ids and labels (IGNORE_INDEX outside trained turns)."""

    input_ids: list[int]
    labels: list[int]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file that passed the dataset validator."""
    with path.open("rb") as file:
        return [json.loads(line) for line in file if line.strip()]


def render(tokenizer: PreTrainedTokenizerBase, messages: list[Message], *, prompt: bool) -> str:
    """The chat template's text for `messages`; `prompt` opens the assistant's reply."""
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    text = tokenizer.apply_chat_template(plain, add_generation_prompt=prompt, tokenize=False)
    return str(text)


def tokenize_chat(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], max_length: int
) -> TokenizedRow:
    """Token ids of a conversation with labels on assistant turns whose weight is not 0."""
    ids: list[int] = []
    labels: list[int] = []
    done = ""
    for index, message in enumerate(messages):
        is_trained = message["role"] == "assistant" and message.get("weight", 1) != 0
        if message["role"] == "assistant":
            done = _extend(
                tokenizer,
                ids,
                labels,
                done,
                render(tokenizer, messages[:index], prompt=True),
                False,
            )
        text = render(tokenizer, messages[: index + 1], prompt=False)
        done = _extend(tokenizer, ids, labels, done, text, is_trained)
    return TokenizedRow(ids[:max_length], labels[:max_length])


def _extend(
    tokenizer: PreTrainedTokenizerBase,
    ids: list[int],
    labels: list[int],
    done: str,
    text: str,
    is_trained: bool,
) -> str:
    """Append the tokens of `text` beyond `done`; return `text` as the new rendered prefix."""
    if not text.startswith(done):
        raise ValueError("the chat template renders a conversation differently as it grows")
    piece: list[int] = tokenizer(text[len(done) :], add_special_tokens=False)["input_ids"]
    ids.extend(piece)
    labels.extend(
        _trained_labels(piece, tokenizer.eos_token_id)
        if is_trained
        else [IGNORE_INDEX] * len(piece)
    )
    return text


def _trained_labels(piece: list[int], eos_id: int | None) -> list[int]:
    """Labels for an assistant turn: its tokens through the end-of-turn token, not after.

    ChatML puts a newline after <|im_end|>; generation stops at <|im_end|>, so the model is
    never asked to predict what follows it.
    """
    if eos_id is None or eos_id not in piece:
        return list(piece)
    end = len(piece) - piece[::-1].index(eos_id)
    return piece[:end] + [IGNORE_INDEX] * (len(piece) - end)


def chat_token_counter(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[Message]], int]:
    """A `count_tokens` for the dataset validator: tokens of a conversation as trained."""

    def count_tokens(messages: list[Message]) -> int:
        ids = tokenizer(render(tokenizer, messages, prompt=False), add_special_tokens=False)
        return len(ids["input_ids"])

    return count_tokens


def collate(
    rows: list[TokenizedRow], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, labels and attention mask for a batch."""
    width = max(len(row.input_ids) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.input_ids)
        input_ids[i, :n] = torch.tensor(row.input_ids)
        labels[i, :n] = torch.tensor(row.labels)
        attention_mask[i, :n] = 1
    return input_ids, labels, attention_mask
