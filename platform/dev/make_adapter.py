"""`make_adapter`: a PEFT LoRA adapter for a dev model, trained on seeded examples or random."""

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from loraplex.dev.corpus import IM_END, adapter_examples
from loraplex.dev.reference import (
    Tools,
    chat_prompt_ids,
    generate_greedy,
    greedy_answer,
    single_thread,
)
from loraplex.workers.trainer.model import save_adapter

__all__ = ["DEFAULT_TARGET_MODULES", "adapter_examples", "greedy_answer", "make_adapter"]

# The projections every serving engine can apply LoRA to; lm_head and embeddings are not.
DEFAULT_TARGET_MODULES = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)  # fmt: skip
BASE_LEARNING_RATE = 3e-3  # measured to fit 8 examples in ~50 steps at r=8
BASE_RANK = 8
CHECK_EVERY = 25
MAX_STEPS = 600
IGNORE_INDEX = -100


class AdapterTrainingError(RuntimeError):
    """Training hit its step cap before greedy output reproduced every example."""


def make_adapter(
    base_dir: Path,
    out_dir: Path,
    rank: int = 8,
    *,
    alpha: float | None = None,
    seed: int = 0,
    random: bool = False,
    examples: list[tuple[str, str]] | None = None,
    tools: Tools | None = None,
    target_modules: Sequence[str] = DEFAULT_TARGET_MODULES,
    steps: int | None = None,
    base_name: str | None = None,
) -> Path:
    """Write adapter_config.json and adapter_model.safetensors for the model in `base_dir`.

    Trained (default): fit `examples` (or `adapter_examples(seed)`) until greedy output
    reproduces every answer, or for exactly `steps` steps when given; with `tools`, every
    prompt offers them (`corpus.task_examples("tools", seed)` gives both). Random: seeded A
    and B.
    `base_name`: the base model's registered name, which the adapter then declares instead of
    the local folder (the platform checks an upload's declared base against its own).
    """
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    lora = LoraConfig(
        r=rank,
        # PEFT annotates lora_alpha as int but scales by any number.
        lora_alpha=alpha if alpha is not None else 2 * rank,  # type: ignore[arg-type]
        target_modules=list(target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with single_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        model = get_peft_model(base, lora)
        if random:
            _randomise_lora_b(model)
        else:
            tokenizer = AutoTokenizer.from_pretrained(base_dir)
            chosen = examples if examples is not None else adapter_examples(seed)
            _train(model, tokenizer, chosen, tools, steps)
    saved = save_adapter(model, out_dir, base_dir)
    if base_name is not None:
        config_file = saved / "adapter_config.json"
        config = json.loads(config_file.read_text())
        config["base_model_name_or_path"] = base_name
        config_file.write_text(json.dumps(config))
    return saved


def _randomise_lora_b(model: PeftModel, std: float = 0.02) -> None:
    """PEFT starts B at zero (a no-op adapter); a random B makes outputs differ from base."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(mean=0.0, std=std)


def _train(
    model: PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[tuple[str, str]],
    tools: Tools | None,
    steps: int | None,
) -> None:
    """Full-batch AdamW on the assistant tokens; stop once greedy output is exact."""
    input_ids, labels, attention_mask = _batch(tokenizer, examples, tools)
    rank = int(model.peft_config["default"].r)  # type: ignore[attr-defined]
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=learning_rate(rank)
    )
    for step in range(1, (steps or MAX_STEPS) + 1):
        model.train()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if (
            steps is None
            and step % CHECK_EVERY == 0
            and _reproduces(model, tokenizer, examples, tools)
        ):
            return
    if steps is None:
        raise AdapterTrainingError(f"examples not reproduced after {MAX_STEPS} steps")


def learning_rate(rank: int) -> float:
    """AdamW step size for a rank; lowered above r=8 so large ranks do not diverge.

    Adam moves every entry of A and B by about lr per step, so the change to B·A grows with
    the rank; at r=64 and lr 3e-3 training overshot and never reproduced the examples.
    """
    return BASE_LEARNING_RATE * min(1.0, math.sqrt(BASE_RANK / rank))


def _batch(
    tokenizer: PreTrainedTokenizerBase, examples: list[tuple[str, str]], tools: Tools | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, labels masked to the answer and its <|im_end|>, and the mask."""
    rows = []
    for question, answer in examples:
        prompt = chat_prompt_ids(tokenizer, question, tools)
        reply = tokenizer(answer + IM_END, add_special_tokens=False)["input_ids"]
        rows.append((prompt + reply, [IGNORE_INDEX] * len(prompt) + reply))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in rows])
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    return input_ids, labels, attention_mask


def _reproduces(
    model: PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: list[tuple[str, str]],
    tools: Tools | None,
) -> bool:
    """True when greedy generation returns every example's answer exactly."""
    model.eval()
    return all(generate_greedy(model, tokenizer, q, tools=tools) == a for q, a in examples)
