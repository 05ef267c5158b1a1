"""Preference margins: how much more likely a model finds the preferred reply than the other.

Used to check a DPO run did what it should: the margin of chosen over rejected replies grows
under the trained adapter compared with the base model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from loraplex.workers.trainer.examples import IGNORE_INDEX, Message, tokenize_chat
from loraplex.workers.trainer.model import torch_threads


@torch.no_grad()
def reply_log_likelihood(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, conversation: list[Message]
) -> float:
    """Sum of log-probabilities of the final assistant turn's tokens given what precedes it."""
    row = tokenize_chat(tokenizer, conversation, max_length=1 << 30)
    input_ids = torch.tensor([row.input_ids])
    labels = torch.tensor(row.labels[1:])
    logits = model(input_ids=input_ids).logits[0, :-1].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    trained = labels != IGNORE_INDEX
    picked = log_probs[trained].gather(1, labels[trained].unsqueeze(1))
    return float(picked.sum())


def preference_margins(
    model_dir: Path, adapter_dir: Path | None, rows: list[dict[str, Any]]
) -> list[float]:
    """Per OpenAI preference row: log p(preferred) - log p(non-preferred), base or adapter."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    margins = []
    with torch_threads(1):
        for row in rows:
            prompt = row["input"]["messages"]
            chosen = reply_log_likelihood(model, tokenizer, [*prompt, *row["preferred_output"]])
            rejected = reply_log_likelihood(
                model, tokenizer, [*prompt, *row["non_preferred_output"]]
            )
            margins.append(chosen - rejected)
    return margins
