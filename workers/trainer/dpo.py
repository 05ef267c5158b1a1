"""Direct preference optimisation through TRL, on OpenAI's preference rows.

TRL's DPOTrainer (on transformers' Trainer) does the loss, batching, checkpoints and resume;
this module converts the rows, maps our hyperparameters onto `DPOConfig`, and bridges
progress, cancel and checkpoints through a Trainer callback. With a PEFT adapter and no
reference model, TRL scores the reference with the adapter disabled: the frozen base.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import torch
from transformers import (
    AutoTokenizer,
    PrinterCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from transformers import TrainingArguments as HfTrainingArguments

from loraplex.workers.trainer.config import (
    MAX_GRAD_NORM,
    WARMUP_STEPS,
    WEIGHT_DECAY,
    Progress,
    TrainConfig,
    TrainingCancelled,
    TrainResult,
)
from loraplex.workers.trainer.examples import read_rows
from loraplex.workers.trainer.model import LoadedBase, load_base, lora_config, save_adapter
from loraplex.workers.trainer.progress import ProgressMeter


def preference_example(row: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI preference row in TRL's conversational prompt/chosen/rejected form."""
    return {
        "prompt": row["input"]["messages"],
        "chosen": row["preferred_output"],
        "rejected": row["non_preferred_output"],
    }


class _Bridge(TrainerCallback):
    """Turns Trainer events into our progress reports, cancels and checkpoint hand-offs."""

    def __init__(
        self,
        on_progress: Callable[[Progress], None],
        should_stop: Callable[[], bool],
        checkpoint: Callable[[Path, int], None] | None,
    ) -> None:
        self._on_progress = on_progress
        self._should_stop = should_stop
        self._checkpoint = checkpoint
        self._meter: ProgressMeter | None = None
        self._tokens_seen = 0
        self.last_logs: dict[str, float] = {}

    def on_train_begin(
        self, args: HfTrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Start the clock for tokens/s and ETA (also after a resume)."""
        self._meter = ProgressMeter(state.max_steps)
        self._tokens_seen = 0

    def on_step_begin(
        self, args: HfTrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Ask `should_stop` before every step."""
        if self._should_stop():
            raise TrainingCancelled(state.global_step + 1)

    def on_log(
        self,
        args: HfTrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        """Report each step's loss (DPOConfig logs every step)."""
        if not logs or "loss" not in logs:
            return
        self.last_logs = dict(logs)
        if self._meter is None:
            return
        tokens = int(logs.get("num_tokens", self._tokens_seen))
        progress = self._meter.step_done(
            state.global_step,
            float(logs["loss"]),
            float(logs.get("learning_rate", 0.0)),
            tokens - self._tokens_seen,
        )
        self._tokens_seen = tokens
        self._on_progress(progress)

    def on_save(
        self, args: HfTrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        """Hand the checkpoint folder the Trainer just wrote to the caller."""
        if self._checkpoint is not None:
            folder = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
            self._checkpoint(folder, state.global_step)


def train_dpo(
    config: TrainConfig,
    *,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    checkpoint: Callable[[Path, int], None] | None,
    resume_from: Path | None,
) -> TrainResult:
    """Run (or resume) a DPO run and save the adapter to `config.out_dir`."""
    from datasets import Dataset
    from trl.trainer.dpo_trainer import DPOTrainer

    loaded = load_base(config)
    tokenizer = AutoTokenizer.from_pretrained(config.base_model_dir)
    dataset = Dataset.from_list([preference_example(r) for r in read_rows(config.train_path)])
    bridge = _Bridge(on_progress, should_stop, checkpoint)
    with TemporaryDirectory(prefix="loraplex-dpo-") as scratch:
        trainer = DPOTrainer(
            model=loaded.model,
            args=_dpo_args(config, loaded, Path(config.checkpoint_dir or scratch)),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(config),
            callbacks=[bridge],
        )
        # The Trainer prints every log dict when tqdm is off; progress goes through the bridge.
        trainer.remove_callback(PrinterCallback)
        assert trainer.model is not None  # DPOTrainer always holds the model it was given
        _keep_adapter_in_float32(trainer.model)
        output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    save_adapter(trainer.model, config.out_dir, config.base_model_dir)
    logs = bridge.last_logs
    return TrainResult(
        adapter_dir=config.out_dir,
        steps=output.global_step,
        trained_tokens=int(logs.get("num_tokens", 0)),
        final_loss=float(logs.get("loss", output.training_loss)),
        quantized=loaded.quantized,
        fallback_reason=loaded.fallback_reason,
        metrics={k: float(v) for k, v in logs.items() if k.startswith(("rewards/", "logps/"))},
    )


def _dpo_args(config: TrainConfig, loaded: LoadedBase, output_dir: Path) -> Any:
    """Our hyperparameters as TRL's DPOConfig."""
    from trl.trainer.dpo_config import DPOConfig

    is_cpu = next(loaded.model.parameters()).device.type == "cpu"
    saves = config.checkpoint_dir is not None and config.checkpoint_every > 0
    return DPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.batch_size,
        num_train_epochs=config.n_epochs,
        max_steps=config.max_steps or -1,
        learning_rate=config.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=WARMUP_STEPS,
        weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM,
        beta=config.dpo_beta,
        max_length=config.max_length,
        seed=config.seed,
        data_seed=config.seed,
        use_cpu=is_cpu,
        bf16=not is_cpu,
        gradient_checkpointing=config.gradient_checkpointing,
        logging_steps=1,
        save_strategy="steps" if saves else "no",
        save_steps=max(1, config.checkpoint_every),
        save_total_limit=1,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _keep_adapter_in_float32(model: torch.nn.Module) -> None:
    """Undo TRL's bfloat16 cast of QLoRA adapter weights (TRL 1.16, quantized bases only).

    The cast follows the QLoRA paper for GPUs; on CPU bfloat16 adapters train slower and
    Adam's small updates round away. The optimizer is created later, in `train()`.
    """
    for param in model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
