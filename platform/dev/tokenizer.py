"""A byte-level BPE tokenizer with ChatML special tokens, trained on the dev corpus."""

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from loraplex.dev.corpus import (
    CHAT_TEMPLATE,
    END_OF_TEXT,
    IM_END,
    SPECIAL_TOKENS,
    TOOL_TOKENS,
    tokenizer_corpus,
)


def train_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Train the dev tokenizer; the corpus is fixed, so every run learns the same merges.

    At most `vocab_size` tokens: the trained ones, then the tool markers (`TOOL_TOKENS`) as
    whole tokens that are not special, as Qwen2.5 has them, so decoding with
    `skip_special_tokens` keeps them for the engines' tool-call parsers.
    """
    bpe = Tokenizer(models.BPE())
    # No prefix space: a ChatML turn starts right after "\n", and a leading space would
    # change how the first word of every answer is split.
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    bpe.add_tokens([AddedToken(token, special=False, normalized=False) for token in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,  # generation stops at the end of an assistant turn
        pad_token=END_OF_TEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=None,
    )
