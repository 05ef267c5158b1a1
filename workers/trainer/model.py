"""Loading the base model for training (QLoRA 4-bit where bitsandbytes can, else full
precision), wrapping it with a LoRA adapter, and saving only the adapter's two files."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, PreTrainedModel

from loraplex.workers.trainer.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class LoadedBase:
    """The base model to train on and whether it really is 4-bit."""

    model: PreTrainedModel
    quantized: bool
    fallback_reason: str | None = None


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run torch on `count` CPU threads (None: leave as is), restoring the setting afterwards."""
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def training_device() -> torch.device:
    """The first GPU when there is one, else the CPU."""
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def load_base(config: TrainConfig) -> LoadedBase:
    """Load the base model frozen: nf4 with double quantization when asked and possible."""
    if config.load_in_4bit:
        try:
            return LoadedBase(_load_4bit(config), quantized=True)
        except (ImportError, RuntimeError, ValueError) as exc:
            reason = f"4-bit loading unavailable, trained in full precision: {exc}"
            log.warning("%s", reason)
            return LoadedBase(_load_full(config), quantized=False, fallback_reason=reason)
    return LoadedBase(_load_full(config), quantized=False)


def _load_full(config: TrainConfig) -> PreTrainedModel:
    """The base in float32 (bfloat16 on GPUs), every weight frozen."""
    device = training_device()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        config.base_model_dir, dtype=dtype, device_map={"": device}
    )
    model.requires_grad_(False)
    return model


def _load_4bit(config: TrainConfig) -> PreTrainedModel:
    """QLoRA's base: nf4 weights with double-quantized statistics."""
    from transformers import BitsAndBytesConfig

    device = training_device()
    # float32 compute on CPU: bfloat16 matmuls there are slower without AMX and lose precision.
    compute = torch.bfloat16 if device.type == "cuda" else torch.float32
    quantization = BitsAndBytesConfig(  # type: ignore[no-untyped-call]
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
    )
    model = AutoModelForCausalLM.from_pretrained(
        config.base_model_dir,
        quantization_config=quantization,
        dtype=compute,
        device_map={"": device},
    )
    disable_cpu_weight_repacking(model)
    # Freezes the base, keeps norms in float32 and, with checkpointing, lets input grads flow.
    prepared: PreTrainedModel = prepare_model_for_kbit_training(  # type: ignore[no-untyped-call]
        model, use_gradient_checkpointing=config.gradient_checkpointing
    )
    return prepared


def disable_cpu_weight_repacking(model: torch.nn.Module) -> int:
    """Stop bitsandbytes repacking 4-bit weights on CPU; return how many layers were changed.

    bitsandbytes 0.50 (CPUs with AVX512-BF16): the first no-grad, eval-mode forward through a
    Linear4bit repacks its weight in place into a layout the backward pass does not support;
    from then on gradients through that layer are silently dropped. A validation pass
    between steps would freeze training without an error, so the repacking is switched off.
    """
    from bitsandbytes.nn.modules import Linear4bit

    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def lora_config(config: TrainConfig) -> LoraConfig:
    """The PEFT LoRA config for a run: only the projections serving engines can apply."""
    return LoraConfig(
        r=config.lora_r,
        # PEFT annotates lora_alpha as int but scales by any number.
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def with_lora(base: PreTrainedModel, config: TrainConfig) -> PeftModel:
    """Wrap the base with a fresh LoRA adapter, its A matrices drawn from the seed."""
    torch.manual_seed(config.seed)
    model = get_peft_model(base, lora_config(config))
    # Trainable weights in float32 even on a bfloat16 base: Adam's small updates vanish in bf16.
    for param in model.parameters():
        if param.requires_grad:
            param.data = param.data.float()
    return model


def save_adapter(model: PeftModel, out_dir: Path, base_dir: Path) -> Path:
    """Save only the two PEFT files, naming the base model by its folder, not this machine."""
    model.peft_config["default"].base_model_name_or_path = Path(base_dir).resolve().name
    model.save_pretrained(str(out_dir), save_embedding_layers=False)
    # PEFT always writes a model card; an adapter upload allows nothing beyond the two files.
    (Path(out_dir) / "README.md").unlink(missing_ok=True)
    return Path(out_dir)
