"""In-process greedy generation with transformers and PEFT: the reference engines must match."""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from loraplex.workers.trainer.model import torch_threads


def single_thread() -> AbstractContextManager[None]:
    """Run torch on one thread, restoring the caller's setting afterwards.

    A ~4M-parameter model gains little from a second thread, and on shared CPUs OpenMP's
    spinning workers made training 10-30x slower (measured, torch 2.13 CPU). One thread also
    keeps float summation order, and so trained adapters, the same on every machine.
    """
    return torch_threads(1)


Tools = list[dict[str, Any]]  # an OpenAI `tools` list, rendered into the system turn


def chat_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, question: str, tools: Tools | None = None
) -> list[int]:
    """Token ids of a one-turn ChatML prompt (offering `tools`) that opens the assistant's reply."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}],
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
    )
    # Render then encode, as serving engines do; the template already holds every marker.
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


@torch.no_grad()
def generate_greedy(
    model: PreTrainedModel | PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    max_new_tokens: int = 32,
    tools: Tools | None = None,
) -> str:
    """Greedy-decode one question with an already loaded model; only the new text is returned."""
    prompt = torch.tensor([chat_prompt_ids(tokenizer, question, tools)])
    output = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return str(tokenizer.decode(output[0, prompt.shape[1] :], skip_special_tokens=True))


def greedy_answers(
    model_dir: Path,
    adapter_dir: Path | None,
    questions: Sequence[str],
    max_new_tokens: int = 32,
    tools: Tools | None = None,
) -> list[str]:
    """Greedy answers to each question from the base model, or with a LoRA adapter applied."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = base if adapter_dir is None else PeftModel.from_pretrained(base, adapter_dir)
    model.eval()
    with single_thread():
        return [generate_greedy(model, tokenizer, q, max_new_tokens, tools) for q in questions]


def greedy_answer(
    model_dir: Path,
    adapter_dir: Path | None,
    question: str,
    max_new_tokens: int = 32,
    tools: Tools | None = None,
) -> str:
    """The greedy answer to one question, as a serving engine should return it."""
    return greedy_answers(model_dir, adapter_dir, [question], max_new_tokens, tools)[0]
