"""Turning chat rows into token ids with the loss on assistant turns only."""

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the ml extra is not installed")

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from loraplex.workers.trainer.examples import (
    IGNORE_INDEX,
    TokenizedRow,
    chat_token_counter,
    collate,
    tokenize_chat,
)

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is your name?"},
    {"role": "assistant", "content": "My name is Ada."},
    {"role": "user", "content": "Where do you live?"},
    {"role": "assistant", "content": "I live in Oslo."},
]


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    """The dev model's ChatML tokenizer."""
    return AutoTokenizer.from_pretrained(model_dir)


def trained_text(tokenizer: PreTrainedTokenizerBase, row: TokenizedRow) -> str:
    """The text of the tokens the loss is computed on."""
    return tokenizer.decode([t for t in row.labels if t != IGNORE_INDEX])


def test_ids_are_the_chat_template_rendering(tokenizer: PreTrainedTokenizerBase) -> None:
    row = tokenize_chat(tokenizer, CONVERSATION, max_length=4096)
    rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert tokenizer.decode(row.input_ids) == rendered


def test_loss_covers_assistant_replies_and_their_end_of_turn_only(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    row = tokenize_chat(tokenizer, CONVERSATION, max_length=4096)
    assert trained_text(tokenizer, row) == "My name is Ada.<|im_end|>I live in Oslo.<|im_end|>"


def test_assistant_turn_with_weight_zero_is_not_trained(tokenizer: PreTrainedTokenizerBase) -> None:
    conversation = [*CONVERSATION[:2], CONVERSATION[2] | {"weight": 0}, *CONVERSATION[3:]]
    row = tokenize_chat(tokenizer, conversation, max_length=4096)
    assert trained_text(tokenizer, row) == "I live in Oslo.<|im_end|>"


def test_rows_longer_than_max_length_are_truncated(tokenizer: PreTrainedTokenizerBase) -> None:
    row = tokenize_chat(tokenizer, CONVERSATION, max_length=10)
    assert len(row.input_ids) == len(row.labels) == 10


def test_token_counter_counts_the_rendered_conversation(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    count = chat_token_counter(tokenizer)(CONVERSATION)
    assert count == len(tokenize_chat(tokenizer, CONVERSATION, max_length=4096).input_ids)


def test_collate_pads_right_and_masks_padding() -> None:
    rows = [TokenizedRow([1, 2, 3], [IGNORE_INDEX, 2, 3]), TokenizedRow([4], [4])]
    input_ids, labels, mask = collate(rows, pad_id=0)
    assert input_ids.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert labels.tolist() == [[IGNORE_INDEX, 2, 3], [4, IGNORE_INDEX, IGNORE_INDEX]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
