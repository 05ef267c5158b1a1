"""The trainer on the dev model: QLoRA learns fixed answers, cancel, resume, DPO, the 4-bit trap."""

import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

pytest.importorskip("peft", reason="the ml extra (torch, transformers, peft) is not installed")
pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")

import bitsandbytes as bnb
import torch
from bitsandbytes.functional import has_avx512bf16
from safetensors.torch import load_file

from loraplex.adapters import ValidationLimits, read_base_model_facts, validate_adapter_dir
from loraplex.dev.reference import greedy_answers
from loraplex.workers.trainer import Progress, TrainConfig, TrainingCancelled, TrainResult, train
from loraplex.workers.trainer.margins import preference_margins
from loraplex.workers.trainer.model import load_base, with_lora
from tests.unit.finetune.conftest import EXAMPLES, PREFERENCES, preference_row

STEPS = 60  # 8 rows in one batch: one step an epoch; 8/8 was reached at ~50 steps
CHECKPOINT_EVERY = 20
WEIGHTS = "adapter_model.safetensors"


@dataclass
class Run:
    """A finished training run and what it reported."""

    result: TrainResult
    progress: list[Progress]
    checkpoints: dict[int, Path]


def config(model_dir: Path, train_file: Path, out_dir: Path, **changes: object) -> TrainConfig:
    """The QLoRA config the tests train with: r 16, a rate that fits 8 rows in ~50 steps."""
    base = TrainConfig(
        base_model_dir=model_dir,
        train_path=train_file,
        out_dir=out_dir,
        n_epochs=STEPS,
        batch_size=8,
        learning_rate_multiplier=15,
        load_in_4bit=True,
        seed=0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def never() -> bool:
    """A should_stop that never stops."""
    return False


@pytest.fixture(scope="module")
def qlora_run(
    model_dir: Path,
    train_file: Path,
    validation_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Run:
    """A full QLoRA run with validation and checkpoints, copied out as an object store would."""
    work = tmp_path_factory.mktemp("qlora")
    kept: dict[int, Path] = {}

    def keep(folder: Path, step: int) -> None:
        kept[step] = Path(shutil.copytree(folder, work / "stored" / folder.name))

    progress: list[Progress] = []
    run_config = config(
        model_dir,
        train_file,
        work / "adapter",
        validation_path=validation_file,
        checkpoint_dir=work / "checkpoints",
        checkpoint_every=CHECKPOINT_EVERY,
    )
    result = train(run_config, on_progress=progress.append, should_stop=never, checkpoint=keep)
    return Run(result, progress, kept)


@pytest.mark.slow
def test_qlora_adapter_reproduces_the_trained_answers(qlora_run: Run, model_dir: Path) -> None:
    answers = greedy_answers(model_dir, qlora_run.result.adapter_dir, [q for q, _ in EXAMPLES])
    correct = sum(got == want for got, (_, want) in zip(answers, EXAMPLES, strict=True))
    assert correct >= 7 and qlora_run.result.quantized


@pytest.mark.slow
def test_base_model_does_not_give_the_trained_answers(model_dir: Path) -> None:
    answers = greedy_answers(model_dir, None, [q for q, _ in EXAMPLES])
    assert not any(got == want for got, (_, want) in zip(answers, EXAMPLES, strict=True))


@pytest.mark.slow
def test_trained_adapter_passes_upload_validation(qlora_run: Run, model_dir: Path) -> None:
    limits = ValidationLimits(max_rank=64, max_bytes=10**8)
    facts = validate_adapter_dir(
        qlora_run.result.adapter_dir, read_base_model_facts(model_dir), limits
    )
    assert facts.rank == 16 and facts.base_model_name == model_dir.name
    assert sorted(p.name for p in qlora_run.result.adapter_dir.iterdir()) == [
        "adapter_config.json",
        WEIGHTS,
    ]


@pytest.mark.slow
def test_progress_is_reported_after_every_step(qlora_run: Run) -> None:
    steps = [p.step for p in qlora_run.progress]
    assert steps == list(range(1, STEPS + 1)) and qlora_run.result.steps == STEPS
    last = qlora_run.progress[-1]
    assert last.eta_s == 0 and last.tokens_per_s > 0 and last.loss < qlora_run.progress[0].loss


@pytest.mark.slow
def test_validation_loss_is_reported_at_checkpoints_and_falls(qlora_run: Run) -> None:
    losses = [p.validation_loss for p in qlora_run.progress if p.validation_loss is not None]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert qlora_run.result.validation_loss is not None
    assert qlora_run.result.validation_loss < losses[1]


@pytest.mark.slow
def test_checkpoints_are_handed_over_every_n_steps(qlora_run: Run) -> None:
    assert sorted(qlora_run.checkpoints) == [20, 40]


@pytest.mark.slow
def test_trained_tokens_count_every_step(qlora_run: Run) -> None:
    assert qlora_run.result.trained_tokens > 0
    assert qlora_run.result.trained_tokens % STEPS == 0  # the same 8 rows every step


@pytest.mark.slow
def test_resume_from_a_checkpoint_ends_with_the_same_adapter(
    qlora_run: Run, model_dir: Path, train_file: Path, validation_file: Path, tmp_path: Path
) -> None:
    progress: list[Progress] = []
    resumed_config = config(
        model_dir,
        train_file,
        tmp_path / "adapter",
        validation_path=validation_file,
        checkpoint_dir=tmp_path / "checkpoints",
        checkpoint_every=CHECKPOINT_EVERY,
    )
    result = train(
        resumed_config,
        on_progress=progress.append,
        should_stop=never,
        resume_from=qlora_run.checkpoints[40],
    )
    assert progress[0].step == 41 and result.steps == STEPS
    assert result.trained_tokens == qlora_run.result.trained_tokens
    resumed = load_file(str(result.adapter_dir / WEIGHTS))
    uninterrupted = load_file(str(qlora_run.result.adapter_dir / WEIGHTS))
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_of_another_run(
    qlora_run: Run, model_dir: Path, train_file: Path, tmp_path: Path
) -> None:
    other = config(model_dir, train_file, tmp_path / "adapter", seed=1)
    with pytest.raises(ValueError, match="from another run"):
        train(other, on_progress=print, should_stop=never, resume_from=qlora_run.checkpoints[20])


@pytest.mark.slow
def test_should_stop_cancels_before_the_next_step(
    model_dir: Path, train_file: Path, tmp_path: Path
) -> None:
    progress: list[Progress] = []
    run_config = config(model_dir, train_file, tmp_path / "adapter")
    with pytest.raises(TrainingCancelled) as cancelled:
        train(run_config, on_progress=progress.append, should_stop=lambda: len(progress) >= 3)
    assert cancelled.value.step == 4 and len(progress) == 3
    assert not (tmp_path / "adapter").exists()


@pytest.mark.slow
def test_unavailable_4bit_falls_back_to_full_precision_with_a_reason(
    model_dir: Path, train_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loraplex.workers.trainer import model as trainer_model

    def no_bitsandbytes(_: TrainConfig) -> None:
        raise ImportError("No module named 'bitsandbytes'")

    monkeypatch.setattr(trainer_model, "_load_4bit", no_bitsandbytes)
    run_config = config(model_dir, train_file, tmp_path / "adapter", max_steps=2)
    result = train(run_config, on_progress=lambda _: None, should_stop=never)
    assert not result.quantized and result.steps == 2
    assert result.fallback_reason is not None and "bitsandbytes" in result.fallback_reason


def lora_b_without_gradient(model: torch.nn.Module) -> list[str]:
    """LoRA B matrices left without gradient by a training step that follows an eval forward.

    B starts at zero, so B's gradient in an early layer is non-zero only if the gradient came
    back through every later layer's 4-bit weights.
    """
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)  # the forward that repacks 4-bit weights when unguarded
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    lora_b = [(n, p.grad) for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b
    return [n for n, grad in lora_b if grad is None or not grad.abs().sum() > 0]


@pytest.mark.slow
def test_gradients_flow_through_4bit_weights_after_an_eval_forward(
    model_dir: Path, train_file: Path, tmp_path: Path
) -> None:
    run_config = config(model_dir, train_file, tmp_path, lora_dropout=0.0)
    loaded = load_base(run_config)
    assert loaded.quantized
    assert lora_b_without_gradient(with_lora(loaded.model, run_config)) == []


@pytest.mark.slow
@pytest.mark.skipif(not has_avx512bf16(), reason="the repacking only happens with AVX512-BF16")
def test_unguarded_bitsandbytes_drops_gradients_after_an_eval_forward(
    model_dir: Path, train_file: Path, tmp_path: Path
) -> None:
    # Documents the bitsandbytes 0.50 bug the trainer guards against; when this fails after
    # an upgrade, the guard in model.disable_cpu_weight_repacking may no longer be needed.
    run_config = config(model_dir, train_file, tmp_path, lora_dropout=0.0)
    model = with_lora(load_base(run_config).model, run_config)
    for layer in model.modules():
        if isinstance(layer, bnb.nn.Linear4bit):
            layer.support_avx512bf16_for_cpu = True
    assert lora_b_without_gradient(model) != []


DPO_STEPS = 10  # 4 rows in one batch, 10 epochs


def dpo_config(model_dir: Path, preference_file: Path, work: Path) -> TrainConfig:
    """A QLoRA DPO run on the four preference rows, checkpointing halfway."""
    return config(
        model_dir,
        preference_file,
        work / "adapter",
        method="dpo",
        n_epochs=DPO_STEPS,
        batch_size=4,
        learning_rate_multiplier=5,
        checkpoint_dir=work / "checkpoints",
        checkpoint_every=5,
    )


@pytest.fixture(scope="module")
def dpo_run(
    model_dir: Path, preference_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """A full DPO run, its checkpoints copied out as an object store would."""
    work = tmp_path_factory.mktemp("dpo")
    kept: dict[int, Path] = {}

    def keep(folder: Path, step: int) -> None:
        kept[step] = Path(shutil.copytree(folder, work / "stored" / folder.name))

    progress: list[Progress] = []
    run_config = dpo_config(model_dir, preference_file, work)
    result = train(run_config, on_progress=progress.append, should_stop=never, checkpoint=keep)
    return Run(result, progress, kept)


@pytest.mark.slow
def test_dpo_widens_the_preferred_over_rejected_margin(dpo_run: Run, model_dir: Path) -> None:
    rows = [preference_row(*p) for p in PREFERENCES]
    before = preference_margins(model_dir, None, rows)
    after = preference_margins(model_dir, dpo_run.result.adapter_dir, rows)
    assert all(a > b for a, b in zip(after, before, strict=True))


@pytest.mark.slow
def test_dpo_reports_progress_after_every_step(dpo_run: Run) -> None:
    assert [p.step for p in dpo_run.progress] == list(range(1, DPO_STEPS + 1))
    assert dpo_run.result.metrics["rewards/margins"] > 0


@pytest.mark.slow
def test_dpo_adapter_passes_upload_validation(dpo_run: Run, model_dir: Path) -> None:
    limits = ValidationLimits(max_rank=64, max_bytes=10**8)
    assert validate_adapter_dir(
        dpo_run.result.adapter_dir, read_base_model_facts(model_dir), limits
    )


@pytest.mark.slow
def test_dpo_resume_from_a_checkpoint_ends_with_the_same_adapter(
    dpo_run: Run, model_dir: Path, preference_file: Path, tmp_path: Path
) -> None:
    progress: list[Progress] = []
    run_config = dpo_config(model_dir, preference_file, tmp_path)
    result = train(
        run_config,
        on_progress=progress.append,
        should_stop=never,
        resume_from=dpo_run.checkpoints[5],
    )
    assert [p.step for p in progress] == list(range(6, DPO_STEPS + 1))
    resumed = load_file(str(result.adapter_dir / WEIGHTS))
    uninterrupted = load_file(str(dpo_run.result.adapter_dir / WEIGHTS))
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


@pytest.mark.slow
def test_dpo_should_stop_cancels_before_the_next_step(
    model_dir: Path, preference_file: Path, tmp_path: Path
) -> None:
    progress: list[Progress] = []
    run_config = dpo_config(model_dir, preference_file, tmp_path)
    with pytest.raises(TrainingCancelled) as cancelled:
        train(run_config, on_progress=progress.append, should_stop=lambda: len(progress) >= 2)
    assert cancelled.value.step == 3 and len(progress) == 2


def test_trainer_package_imports_without_torch() -> None:
    code = "import sys, loraplex.workers.trainer; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
